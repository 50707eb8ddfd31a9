"""A model's chat template rendered with jinja2 the way transformers' `apply_chat_template` renders
it, so `generate --chat` gives the model the same prompt text.

    render_chat(template, [{"role": "user", "content": "Hi"}], {"bos_token": "<s>"})
    -> "<s>[INST] Hi [/INST]"          (for a Llama-2 style template)

The environment is jinja2's immutable sandbox with `trim_blocks` and `lstrip_blocks` and the
`loopcontrols` extension; templates see `messages`, `add_generation_prompt=True`, `tools=None`,
`documents=None` and the tokenizer's named special tokens (`bos_token`, `eos_token`, ...) as
strings; `raise_exception(msg)`, `strftime_now(fmt)`, `dict(...)` and `namespace(...)`, and a
`tojson` filter that does not escape HTML (json.dumps, `ensure_ascii=False`). A template that
raises, or fails to parse, is one `InputError` with jinja2's message.

Not handled: `{% generation %}` blocks (assistant masks), tools and documents given by the user,
`continue_final_message`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from optgraph.errors import InputError


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@lru_cache(maxsize=8)
def _compiled(template: str) -> Any:
    try:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise InputError("--chat needs jinja2 (pip install jinja2)") from None

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = dict
    env.globals["namespace"] = jinja2.utils.Namespace
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateError as err:
        raise InputError(f"--chat: the chat template does not parse: {err}") from None


def render_chat(
    template: str, messages: Sequence[Mapping[str, Any]], special_tokens: Mapping[str, str]
) -> str:
    """The prompt text for `messages`, with the assistant's generation prompt."""
    import jinja2

    compiled = _compiled(template)
    context = {**special_tokens}
    try:
        text: str = compiled.render(
            messages=[dict(m) for m in messages],
            tools=None,
            documents=None,
            add_generation_prompt=True,
            **context,
        )
    except jinja2.exceptions.TemplateError as err:
        raise InputError(f"--chat: the chat template failed: {err}") from None
    return text
