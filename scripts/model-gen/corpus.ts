/**
 * Built-in English text the tokenizer's merges are learned from. It is original
 * prose written for this project (no licence questions), plain and varied enough
 * that the frequent English fragments ("the", "ing", " and", "tion") become
 * tokens. Changing it changes every generated tokenizer, so bump the generator
 * version when you do.
 */
export const TRAINING_TEXT = `
The harbour was quiet in the early morning, and the fishing boats rocked slowly against the stone wall.
A woman in a green coat walked along the pier with a basket of bread, stopping now and then to talk with the sailors
who were mending their nets. The water was grey and still, and the gulls were waiting on the posts for the first catch.

"Will the weather hold?" she asked an old man who was painting the name of his boat in careful white letters.
He looked at the sky for a long time before he answered. "It will hold until the evening," he said. "After that, nobody
knows. The wind is turning to the west, and when it turns like that, the sea changes its mind quickly."

She thanked him and went on. At the end of the pier there was a small station where the harbour master kept his
records: the names of the ships, the times they left and returned, the weight of the fish they brought back, and the
condition of the engines. Every morning he wrote the numbers into a large book, and every evening he compared them with
the numbers from the day before. He said that the book was the memory of the town, and that without it nobody would
remember which years were good and which were hard.

In the village behind the harbour, the bakery had been open since four o'clock. The baker was a patient man who believed
that good bread could not be hurried. He mixed the flour, the water, the salt and the yeast in the same order every day,
and he let the dough rest while he swept the floor and prepared the ovens. When the loaves were ready, the smell filled
the whole street, and children stopped on their way to school to look through the window.

Learning a new skill is similar to baking bread. You begin with simple ingredients and a clear recipe, you follow the
instructions carefully, and you make mistakes. Then you adjust the temperature, the timing and the amount of water,
and you try again. After many attempts, the process becomes natural, and you start to understand why each step matters.
The important thing is to keep practising, to pay attention to what happens, and to write down what you learn.

The school stood on a hill above the village. Its teachers taught reading, writing, mathematics, history and science,
and on Fridays the students went down to the harbour to study the tides. They measured the height of the water every
hour, drew graphs of the results, and tried to predict the next high tide. Some of the predictions were wrong, but the
students discovered that the errors were smaller when they used more observations and thought about the moon.

Computers follow instructions too, but they do it without understanding. A program is a sequence of operations that
transforms information: it reads the input, performs calculations, stores the intermediate values in memory, and
produces an output. When the program is written well, it is easy to read, easy to test and easy to change. When it is
written badly, every small change breaks something else, and the people who maintain it spend their days searching for
the reason. Good programmers therefore write small functions, choose clear names, and explain in comments why the code
does what it does, not only what it does.

A language model is a program that predicts the next word of a text. It reads the words that came before, turns each
one into a list of numbers, and combines these numbers through many layers of simple operations. At the end it produces
a score for every word in its vocabulary, and the word with the highest score, or a word chosen at random according to
the scores, becomes the next part of the text. Then the process repeats. To avoid doing the same work again for every
new word, the model keeps a cache of the keys and values it has already computed, and this cache grows by one position
with every step. The memory it needs depends on the number of layers, the number of heads and the length of the
conversation, which is why a careful runner measures it before it starts.

In the afternoon the wind changed, just as the old man had said. The clouds came in from the west, dark and heavy, and
the boats returned one after another, their engines working hard against the waves. The harbour master stood at his
window and counted them. When the last boat was safely inside the wall, he closed his book, put on his coat, and walked
home through the rain, thinking about the weather, the fish, the bread and the long history of the small town by the sea.

Questions, answers and numbers: what is the time? It is half past seven. How many boats are there? There are twelve
boats, three of them new. Where is the station? It is at the end of the pier, next to the light. Which road leads to the
school? The road on the left, past the bakery and the church. 1, 2, 3, 4, 5, 10, 20, 100, 2024, 3.14 and 42.
`;
