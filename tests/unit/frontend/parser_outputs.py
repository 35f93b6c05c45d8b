"""The model outputs `test_tool_parsers_vllm.py` gives vLLM's parsers and ours: tool calls written in each format
(`OUTPUTS`, with the markers and tools they use) and reasoning in each family's tags (`THOUGHTS`)."""

from __future__ import annotations

MARKERS = ["<tool_call>", "</tool_call>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
           "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
           "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>", "<arg_key>", "</arg_key>",
           "<arg_value>", "</arg_value>", "<minimax:tool_call>", "</minimax:tool_call>", "<seed:tool_call>",
           "</seed:tool_call>", "<seed:bos>", "<seed:eos>", "<think>", "</think>", "<seed:think>", "</seed:think>",
           "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "<｜DSML｜function_calls>", "</｜DSML｜function_calls>",
           "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>", "<｜DSML｜ calls>", "</｜DSML｜ calls>", "<longcat_tool_call>", "</longcat_tool_call>", "<|tool_call|>", "<|tool_call>", "<tool_call|>", '<|"|>',
           "<|channel>", "<channel|>", "<|tool_call_start|>", "<|tool_call_end|>", "<tool_calls>", "</tool_calls>",
           "<|action_start|>", "<|plugin|>", "<|action_end|>", "<start_function_call>", "<end_function_call>",
           "<escape>", "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>", "<｜tool_call_begin｜>", "<｜tool_call_end｜>",
           "<｜tool_sep｜>", "<|tools_prefix|>", "<|tools_suffix|>", "<|open|>", "<|close|>", "<|sep|>",
           "<mm:think>", "</mm:think>", "<assistant>"]  # fmt: skip
O, X, P = "<|open|>", "<|close|>", "<|sep|>"  # Kimi K3's
M = "]<]minimax[>["  # MiniMax M3's namespace
PROPS = {"city": {"type": "string"}, "days": {"type": "integer"}, "hot": {"type": "boolean"},
         "tags": {"type": "array", "items": {"type": "string"}}, "temp": {"type": ["number", "null"]},
         "where": {"type": "object", "properties": {"lat": {"type": "number"}}}}  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": PROPS}}}
         for n in ("get_weather", "search")]  # fmt: skip
DSK = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
D, Q = "｜DSML｜", '<|"|>'
KIMI = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_end|>"
GS = "<|role_sep|>"  # GigaChat 3's
DOTS = "<dots_function_call>", "</dots_function_call>"

OUTPUTS: list[tuple[str, str]] = [
    ("qwen3_coder", "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "<parameter=days>\n3\n</parameter>\n<parameter=hot>\ntrue\n</parameter>\n<parameter=tags>\n"
                    '["a", "b"]\n</parameter>\n<parameter=temp>\nnull\n</parameter>\n</function>\n</tool_call>'),
    ("qwen3_xml", "<tool_call>\n<function=get_weather>\n<parameter=city>\n12\n</parameter>\n<parameter=where>\n"
                  '{"lat": "48.8"}\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n'
                  "<parameter=q>\nmulti\nline\n</parameter>\n</function>\n</tool_call>"),
    ("qwen3_coder", "No call here, just <b>markup</b> and a <function word."),
    ("seed_oss", "<seed:tool_call>\n<function=get_weather>\n<parameter=days>\n2.0\n</parameter>\n</function>\n"
                 "</seed:tool_call>"),
    ("glm45", "Sure.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
              "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"),
    ("glm47", '<tool_call>get_weather<arg_key>tags</arg_key><arg_value>["a"]</arg_value><arg_key>hot</arg_key>'
              "<arg_value>0</arg_value></tool_call><tool_call>search</tool_call>"),
    ("minimax_m2", 'Sure.\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Seattle'
                   '</parameter>\n<parameter name="days">3</parameter>\n</invoke>\n<invoke name="search">\n'
                   "</invoke>\n</minimax:tool_call>"),
    ("kimi_k2", f"Sure.{KIMI[0]}\n{KIMI[2]}functions.get_weather:0\n<|tool_call_argument_begin|>"
                f'{{"city": 7, "days": "3"}}{KIMI[3]}\n{KIMI[2]}functions.search:1<|tool_call_argument_begin|>{{}}'
                f"{KIMI[3]}\n{KIMI[1]}"),
    ("deepseek_v3", f"Sure.{DSK[0]}{DSK[2]}function{DSK[4]}get_weather\n```json\n{{\"city\": \"Paris\", \"days\": 3}}"
                    f"\n```{DSK[3]}\n{DSK[2]}function{DSK[4]}search\n```json\n{{}}\n```{DSK[3]}{DSK[1]}"),
    ("deepseek_v31", f'Sure.{DSK[0]}{DSK[2]}get_weather{DSK[4]}{{"city": "Paris", "days": 3}}{DSK[3]}{DSK[2]}search'
                     f"{DSK[4]}{{}}{DSK[3]}{DSK[1]}"),
    ("deepseek_v31", "Plain text, no calls."),
    ("hermes", 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    ("qwen3_json", '<tool_call>{"name": "search", "arguments": {"days": "3"}}</tool_call>'),
    ("llama4_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    ("mistral", 'Sure.[TOOL_CALLS]get_weather{"city": "Paris"}'),
    ("qwen3_coder", "<tool_call>\n<function=search>\n<parameter=q>\nx\n</parameter>\n</function>\n</tool_call>\nDone."),
    ("qwen3_coder", "<tool_call>\n<function=search>\n<parameter=q>\nx\n"),
    ("qwen3_coder", "<tool_call>\n<function=search>\n<parameter=q>\nx\n</parameter>\n</function>\n"
                    "<function=get_weather>\n<parameter=days>\n4\n</parameter>\n</function>\n</tool_call>"),
    ("glm45", "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>x</arg_value>\n</tool_call>\nDone."),
    ("glm45", "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>x"),
    ("minimax_m2", '<minimax:tool_call>\n<invoke name="search">\n<parameter name="q">x</parameter>\n</invoke>\n'),
    ("kimi_k2", f'{KIMI[0]}{KIMI[2]}functions.search:0<|tool_call_argument_begin|>{{"q": "x"}}{KIMI[3]}'),
    ("kimi_k2", f'{KIMI[0]}{KIMI[2]}functions.search:0<|tool_call_argument_begin|>{{"q": "x"}}{KIMI[3]}{KIMI[1]}'
                "After."),
    ("deepseek_v3", f"{DSK[0]}{DSK[2]}function{DSK[4]}search\n```json\n{{\"q\": \"x\"}}\n```{DSK[3]}"),
    ("deepseek_v31", f'{DSK[0]}{DSK[2]}search{DSK[4]}{{"q": "x"}}{DSK[3]}{DSK[1]}After.'),
    ("hermes", '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>After.'),
    ("deepseek_v32", f'Sure.<{D}function_calls>\n<{D}invoke name="get_weather">\n<{D}parameter name="city" '
                     f'string="true">12</{D}parameter>\n<{D}parameter name="days" string="false">3</{D}parameter>\n'
                     f'<{D}parameter name="tags">["a"]</{D}parameter>\n<{D}parameter name="hot" string="true">true'
                     f'</{D}parameter>\n</{D}invoke>\n<{D}invoke name="search">\n</{D}invoke>\n</{D}function_calls>'
                     "After."),
    ("deepseek_v32", f'<{D}invoke name="search">\n<{D}parameter name="q" string="true">x</{D}parameter>\n</{D}invoke>'),
    ("deepseek_v32", f'<{D}function_calls>\n<{D}invoke name="search">\n<{D}parameter name="days" string="true">4'
                     f'<{D}parameter name="q">"multi\\nline"'),
    ("deepseek_v32", "No calls, just a <｜DSML｜invoke word."),
    ("deepseek_v4", f'<{D}tool_calls>\n<{D}invoke name="get_weather">\n<{D}parameter name="where" string="false">'
                    f'{{"lat": "48.8"}}</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'),
    ("deepseek_v4", f'<{D}toolcalls><{D}invoke name="search"><{D}parameter name="q" string="true">x</{D}parameter>'
                    f"</{D}invoke></{D}tool_calls>"),
    ("deepseek_v41", f'Sure.<{D} calls>\n<{D} invoke name="get_weather">\n<{D} parameter name="days" string="false">'
                     f'3</{D} parameter>\n<{D} parameter name="city" string="true">7</{D} parameter>\n</{D} invoke>\n'
                     f"</{D} calls>After."),
    ("deepseek_v41", f'<{D} invoke name="search">\n<{D} parameter name="q" string="true">x</{D} parameter>\n'
                     f"</{D} invoke>"),
    ("longcat", 'Sure.<longcat_tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</longcat_tool_call>'),
    ("granite", 'Sure. <|tool_call|>[{"name": "get_weather", "arguments": {"city": "SF", "days": "3"}}, '
                '{"name": "search", "arguments": {}}] After.'),
    ("granite", '<tool_call> [{"name": "search", "arguments": {"q": "x"}}]'),
    ("granite", "Just text [1, 2] and no call."),
    ("granite4", 'Sure. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}</tool_call> and '
                 '<tool_call>{"name": "search", "arguments": {}}</tool_call> done.'),
    ("granite4", 'Cut <tool_call>{"name": "search", "arguments": {"q": "x"}}'),
    ("granite4", "No calls."),
    *((name, f'Sure.<{tag}>\n{{bad}}\n</{tag}>\nMore.<{tag}>{{"name": "search", "arguments": {{}}}}</{tag}> End.')
      for name, tag in (("hermes", "tool_call"), ("longcat", "longcat_tool_call"), ("granite4", "tool_call"),
                        ("ernie45", "tool_call"))),  # a section that is no call: all of the output is content
    ("gemma4", f"Sure.<|tool_call>call:get_weather{{city:{Q}Paris, FR{Q},days:3,hot:true,tags:[{Q}a{Q},{Q}b{Q}],"
               f"where:{{lat:48.8}},temp:null}}<tool_call|>Then more."),
    ("gemma4", f"<|tool_call>call:search{{q:{Q}x{{y}}{Q}}}<tool_call|><|tool_call>call:get_weather{{city:7,extra:true}}"
               "<tool_call|>"),
    ("gemma4", "<|tool_call>:search{}<tool_call|>"),
    ("gemma4", f"<|tool_call>call:search{{q:{Q}cut"),
    ("gemma4", "No call {a:1}"),
    ("step3p5", "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"),
    ("mimo", "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n<parameter=city>Paris"
             "</parameter>\n</function>\n</tool_call>"),
    ("pythonic", '[get_weather(city="Paris", days=-3, hot=true, temp=null, tags=("a", "b"), where={"lat": 1.5}), '
                 "search()]"),
    ("pythonic", "[get_weather(city=f'Paris', tags={'a'}, hot=False, days=+2)]"),
    ("pythonic", "[get_weather(city=some_name)]"),
    ("llama4_pythonic", '<|python_start|>[search(q="x")]<|python_end|>'),
    ("olmo3", '<function_calls>\nget_weather(city="Paris", days=3, hot=true)\nsearch(q=null)\n</function_calls>'),
    ("olmo3", '<function_calls>get_weather(city="Paris")</function_calls>After.'),
    ("olmo3", "<function_calls>\nnot a call\n</function_calls>"),
    ("olmo3", "Just an answer."),
    ("lfm2", 'Sure.<|tool_call_start|>[get_weather(city="Paris", hot=true), search(q=-1)]<|tool_call_end|>\nDone.'),
    ("lfm2", '<|tool_call_start|>[api.search(q="x")]<|tool_call_end|>'),
    ("lfm2", '<|tool_call_start|>[search(q="x")]'),
    ("lfm2", "<|tool_call_start|>[]<|tool_call_end|>"),
    ("phi4_mini_json", 'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "search", '
                       '"parameters": {"q": "x"}}]'),
    ("phi4_mini_json", "No call here."),
    ("jamba", 'Sure.<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris", "tags": ["a"]}}, '
              '{"name": "search", "arguments": {}}]</tool_calls>'),
    ("jamba", '<tool_calls>[{"name": "search", "arguments": {"q": "x"}}, {"name": "broken"}]</tool_calls>'),
    ("jamba", '<tool_calls>[{"name": "search", "arguments": {"q": "x"}}]'),
    ("hunyuan_a13b", 'Let me.<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "broken"}]'
                     "</tool_calls>"),
    ("hunyuan_a13b", '<tool_calls>\n[{"name": "search", "arguments": {"q": "x"}}]\n</tool_calls>'),
    ("internlm", 'Sure.<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Paris"}}'
                 "<|action_end|>"),
    ("internlm", '<|action_start|><|plugin|>{"name": "search", "arguments": {"q": "x"}}'),
    ("internlm", "No call."),
    ("ernie45", 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "where": {"lat": 1}}}\n'
                '</tool_call>\n<tool_call>{"name": "search", "arguments": {}}</tool_call>'),
    ("ernie45", '<tool_call>{"name": "search", "arguments": {"q": "x"}}'),
    ("functiongemma", "Sure. <start_function_call>call:get_weather{city:<escape>Paris, FR<escape>,days:<escape>3<escape>,"
                      "tags:<escape>[\"a\"]<escape>,hot:true}<end_function_call><start_function_call>call:search{}"
                      "<end_function_call>"),
    ("functiongemma", "<start_function_call>call:search{q:<escape>cut {x}"),
    ("functiongemma", "<start_function_call>call:search{q:<escape>x<escape>}<end_function_call>After."),
    ("functiongemma", "No call {a:<escape>1<escape>}"),
    ("xlam", '[{"name": "get_weather", "arguments": {"city": "Paris", "tags": ["a"]}}, {"name": "search", '
             '"arguments": {}}, {"name": "no_arguments"}]'),
    ("xlam", '```json\n[{"name": "search", "arguments": {"q": "x"}}]\n```\nDone.'),
    ("xlam", '[TOOL_CALLS][{"name": "search", "arguments": {"q": "x"}}]\nDone.'),
    ("xlam", '<tool_call>[{"name": "search", "arguments": {"q": "x"}}]</tool_call>'),
    ("xlam", "An answer [with brackets] and no call."),
    ("xlam", "```python\nprint(1)\n```"),
    ("step3", 'Sure.<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">'
              '<steptml:parameter name="city"> Paris </steptml:parameter><steptml:parameter name="days">3'
              '</steptml:parameter><steptml:parameter name="hot">True</steptml:parameter><steptml:parameter '
              'name="temp">2.5</steptml:parameter><steptml:parameter name="tags">["a"]</steptml:parameter>'
              '</steptml:invoke><｜tool_call_end｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke '
              'name="search"></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜> Done.'),
    ("step3", '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="search">'
              '<steptml:parameter name="q">x</steptml:parameter></steptml:invoke><｜tool_call_end｜>'),
    ("step3", '<｜tool_calls_begin｜><｜tool_call_begin｜>python<｜tool_sep｜>x<｜tool_call_end｜><｜tool_calls_end｜>'),
    ("apertus", 'I will check. <|tools_prefix|>[{"get_weather": {"city": "Paris", "tags": ["a"]}}, {"search": {}}]'
                "<|tools_suffix|>"),
    ("apertus", '<|tools_prefix|>[{"search": {"q": "x"}}]'),
    ("apertus", '<|tools_prefix|>{"search": {"q": "x"}}<|tools_suffix|>'),
    ("apertus", "No call [{}]."),
    ("ling3", "Sure.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>"
              "\n<arg_value>3</arg_value>\n</tool_call>"),
    ("granite-20b-fc", 'Sure. <function_call> {"name": "get_weather", "arguments": {"city": "Paris", "tags": ["a"]}} '
                       '<function_call> {"name": "search", "arguments": {}}'),
    ("granite-20b-fc", '<function_call>{"name": "search", "arguments": {"q": "x"}} and then'),
    ("granite-20b-fc", "No call here."),
    ("kimi_k3", f"{O}response{P}Let me check.{X}response{P}{O}tools{P}{O}call tool=\"get_weather\" index=\"1\"{P}"
                f"{O}argument key=\"city\" type=\"string\"{P}7{X}argument{P}{O}argument key=\"days\" type=\"integer\"{P}3"
                f"{X}argument{P}{O}argument key=\"where\" type=\"object\"{P}{{\"lat\": 1}}{X}argument{P}{X}call{P}"
                f"{O}call tool=\"search\" index=\"2\"{P}{X}call{P}{X}tools{P}{X}message{P}"),
    ("kimi_k3", f"Sure.{X}response{P}{O}tools{P}{O}call tool=\"a&amp;b\" index=\"1\"{P}{O}argument key=\"q\" "
                f"type=\"number\"{P}not json{X}argument{P}{X}call{P}"),
    ("kimi_k3", f"{O}response{P}Just an answer.{X}response{P}{X}message{P}"),
    ("kimi_k3", f"{O}tools{P}{O}call index=\"1\"{P}{X}call{P}{X}tools{P}"),
    ("minimax_m3", f"Sure.\n{M}<tool_call>\n{M}<invoke name=\"get_weather\">\n{M}<city>Paris{M}</city>\n{M}<days>3{M}</days>\n"
                   f"{M}<tags>{M}<item>a{M}</item>{M}<item>b{M}</item>{M}</tags>\n{M}<where>{M}<lat>1.5{M}</lat>{M}</where>\n"
                   f"{M}<hot>true{M}</hot>\n{M}</invoke>\n{M}<invoke name='search'>{M}<q>x{M}</q>{M}<q>y{M}</q>{M}</invoke>\n"
                   f"{M}</tool_call>"),
    ("minimax_m3", f"{M}<tool_call>{M}<invoke name=search>{M}<q>mixed {M}<a>1{M}</a> text{M}</q>{M}<temp>{M}</temp>"
                   f"{M}<bad>unclosed{M}</invoke>{M}</tool_call>After."),
    ("minimax_m3", f"{M}<tool_call>{M}<invoke name=\"search\">{M}<q>cut"),
    ("minimax_m3", "No call ]<] here."),
    ("gigachat3", "Just an answer, no function call."),
    ("gigachat3", "The answer.<|message_sep|>\n\nand what follows the end of the message.</s>"),
    ("gigachat3", f"Let me check.<|message_sep|>\n\nfunction call{GS}\n{{\"name\": \"get_weather\", \"arguments\": "
                  '{"city": "Paris", "days": 3, "tags": ["a"], "where": {"lat": 1.5}}}'),
    ("gigachat3", '<|function_call|>{"name": "search", "arguments": {"q": "two\nlines"}}</s>'),
    ("gigachat3", 'Sure.<|function_call|>{"name": "search", "arguments": {}}'),
    ("gigachat3", 'Cut<|message_sep|>\n\n<|function_call|>{"name": "search", "arguments": {"q": "x"'),  # no JSON
    ("gigachat3", 'Bad.<|function_call|>{"name": "search", "arguments": "q=x"}'),  # JSON, but no call
    ("gigachat3", 'Two.<|function_call|>{"name": "search", "arguments": {}}<|function_call|>{"name": "search"}'),
    ("dots", "Just an answer, <invoke> and all."),
    ("dots", f'Sure.{DOTS[0]}\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
             '<parameter name="days"> 3 </parameter>\n<parameter name="hot">yes</parameter>\n<parameter name="temp">2.0'
             '</parameter>\n<parameter name="where">{"lat": 1}</parameter>\n<parameter name="tags">["a"]</parameter>\n'
             f'</invoke>\n<invoke name=\'search\'>\n<parameter name=q>null</parameter>\n</invoke>\n{DOTS[1]}'),
    ("dots", f'{DOTS[0]}{{"name": "search", "arguments": {{"q": "x"}}}}{DOTS[1]} between {DOTS[0]}'
             f'{{"name": "get_weather", "parameters": {{"days": "3"}}}}{DOTS[1]} after.'),
    ("dots", f'Unknown.{DOTS[0]}<invoke name="ghost"></invoke>{DOTS[1]} Then {DOTS[0]}{{"name": "search"}}{DOTS[1]}'),
    ("dots", f'No call.{DOTS[0]}garbage{DOTS[1]} More text.{DOTS[0]}{{"name": "search", "arguments": [1]}}{DOTS[1]}'),
    ("dots", f'Cut short.{DOTS[0]}<invoke name="search"><parameter name="q">x</parameter></invoke>'),
    ("poolside_v1", "Sure.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value> Paris </arg_value>\n"
                    "<arg_key>days</arg_key>\n<arg_value> 3 </arg_value>\n<arg_key>hot</arg_key><arg_value>True"
                    "</arg_value><arg_key>tags</arg_key><arg_value>['a', 'b']</arg_value><arg_key>temp</arg_key>"
                    "<arg_value>null</arg_value><arg_key>where</arg_key><arg_value>{\"lat\": 1.5}</arg_value>\n"
                    "</tool_call>"),
    ("poolside_v1", "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>x y</arg_value>\n</tool_call> between "
                    "<tool_call>get_weather</tool_call>\n<tool_call>get_weather\n<arg_key>days</arg_key>"
                    "<arg_value>2"),
    ("poolside_v1", "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>x"),
    ("poolside_v1", "No call, just <tool_call and <arg_key> text."),
]

THOUGHTS = ["The answer.", "<think>Plan.</think>\nThe answer.", "Plan.</think>The answer.", "<think>Cut short",
            "Plan.<tool_call>\n<function=search>", "Plan.<|tool_calls_section_begin|>x",
            "<seed:think>Plan.</seed:think>The answer.", "Plan.</think>The answer.<think>more</think>end",
            "A</think>B</think>C", "<think>A<think>B</think>C", "Plan.\n</think>\nAns", "Plan. \n",
            "<seed:think>A<seed:think>B</seed:think>C</seed:think>D", "Plan.<minimax:tool_call>x",
            "Plan.<｜DSML｜tool_calls>x", "Plan.<｜DSML｜ calls>x", "<|channel>thought\nPlan.<channel|>The answer.", "thought\nPlan.<channel|>Ans",
            "Plan.<channel|>Ans", "<|channel>thought\nPlan.<|tool_call>call:x{}<tool_call|>", "<|channel>thought",
            "Ans<channel|>more<|channel>thought\nX<channel|>Y", "<|channel>thought\nA  \n<channel|>B",
            "<|channel>thoughtful<channel|>B", "thought", "[THINK]Plan.[/THINK]The answer.", "Plan.[/THINK]Ans",
            "[THINK]Plan. \n[/THINK]Ans[THINK]more \n[/THINK]end", "[THINK]Plan.[TOOL_CALLS]x{}", "[THINK]cut",
            "<think>A \n</think>B<think>C</think>D", f"Plan.{X}think{P}{O}response{P}Ans{X}response{P}{X}message{P}",
            f"{O}think{P}Plan.{X}think{P}Ans{X}message{P}", f"{O}response{P}Ans{X}response{P}",
            "<mm:think>Plan.</mm:think>Ans", "Plan.</mm:think>Ans", "</mm:think>Ans", "Ans <mm:think>Plan.</mm:think> more",
            "Ans</mm:think>x", "Here is my thought process: A Here is my response: B", "Here is my answer.",
            "Here's my thought process:\nA\nHere's my response:\nB", "Here is my thought process: cut",
            "Here is my thought process: A. Here we go. Here is my response: B Here is my response: C",
            "Hello Here is my thought process: A Here is my response: B", "Here",
            "<think>\nA\n</think>\n<answer>\nB\n</answer>", "<think>\n\n</think>\n<answer>\nB\n</answer>",
            "<think>\nA\n</think>\n<answer>\nB", "<think>\nA", "<answer>\nB\n</answer>",
            "<think>\nA\n</think>\n<answer>\nB\n</answer>more", "<think>\nA\n</thinking>\nB",
            "abc\n</think>\n\n<response>\ndef\n</response>\n", "Plan.\n</think>\n\n\nThe answer.",
            "A</think>B</think>\n\nC", "A</think>\n<response>B</response>C</response>D", "A</think><response>B",
            "A</think>x<response>B</response>", "Plan.</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>"]  # fmt: skip
