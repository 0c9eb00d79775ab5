/** Parts of real models' chat templates, for tests that render them. */

/** Qwen3-Coder's own template (its tokenizer_config.json), the part that writes an earlier turn's tool calls. */
export const QWEN3_CODER_CALLS =
  "{%- for message in messages %}{%- if message.tool_calls is defined and message.tool_calls %}{%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{%- if tool_call.arguments is defined %}{%- for args_name, args_value in tool_call.arguments|items %}{{- '<parameter=' + args_name + '>\\n' }}{%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}{{- args_value }}{{- '\\n</parameter>\\n' }}{%- endfor %}{%- endif %}{{- '</function>\\n</tool_call>' }}{%- endfor %}{%- endif %}{%- endfor %}";
