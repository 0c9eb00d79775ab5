/** Parts of real models' chat templates, for tests that render them. */

/** Qwen3-Coder's own template (its tokenizer_config.json), the part that writes an earlier turn's tool calls. */
export const QWEN3_CODER_CALLS =
  "{%- for message in messages %}{%- if message.tool_calls is defined and message.tool_calls %}{%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{%- if tool_call.arguments is defined %}{%- for args_name, args_value in tool_call.arguments|items %}{{- '<parameter=' + args_name + '>\\n' }}{%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}{{- args_value }}{{- '\\n</parameter>\\n' }}{%- endfor %}{%- endif %}{{- '</function>\\n</tool_call>' }}{%- endfor %}{%- endif %}{%- endfor %}";

/**
 * ChatML that insists on user and assistant turns alternating, as the templates of Gemma, Mistral and Llama 2 do
 * (their check and message, word for word): two user messages in a row are refused.
 */
export const ALTERNATING_CHATML =
  "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set sys = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set sys = '' %}{% endif %}" +
  "{% if sys %}{{ '<|im_start|>system\\n' + sys + '<|im_end|>\\n' }}{% endif %}" +
  "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
  "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
