"""Probes of templating: templates checked when written, bounded when rendered."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import jinja2
import pytest
from jinja2.sandbox import SandboxedEnvironment

from events_svc import errors
from events_svc.templating import (
    DEADLINE_SECONDS,
    MAX_NODES,
    MAX_OUTPUT,
    MAX_TREE_DEPTH,
    RenderFailed,
    check_template,
    compile_template,
    render,
    render_pairs,
)

PARIS_SUMMER = timezone(timedelta(hours=2))
CONTEXT: dict[str, Any] = {
    "registration": {
        "name": "Alice Martin",
        "email": "alice@example.org",
        "phone": "+33 1 23 45 67 89",
        "company_name": "Acme",
        "barcode": "4242424242",
        "state": "open",
    },
    "event": {
        "name": "Spring Conference",
        "date_begin": datetime(2025, 5, 1, 9, 0, tzinfo=PARIS_SUMMER),
        "date_end": datetime(2025, 5, 1, 17, 30, tzinfo=PARIS_SUMMER),
        "date_tz": "Europe/Paris",
        "location": "Paris",
        "event_url": "https://example.org/spring",
    },
    "ticket": {"name": "VIP"},
    "slot": {"date_begin": datetime(2025, 5, 1, 9, tzinfo=UTC), "date_end": None},
    "links": {"ics": "https://example.org/e.ics", "my_tickets": ""},
}
# spends its whole deadline: 2**25 macro calls, no loop, no output
BURNS_DEADLINE = (
    "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(25) }}"
)


def fails(source: str, context: dict[str, Any] | None = None) -> RenderFailed:
    """Render a hostile template: it must fail in time, saying nothing of the attendee."""
    started = time.monotonic()
    with pytest.raises(RenderFailed) as failure:
        render(compile_template(source), CONTEXT if context is None else context)
    assert time.monotonic() - started < DEADLINE_SECONDS + 1.0
    for secret in ("Alice", "alice@example.org", "4242424242"):
        assert secret not in str(failure.value)
        assert secret not in failure.value.reason
    return failure.value


def plain(source: str, context: dict[str, Any]) -> str:
    env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)
    return env.from_string(source).render(context)


# --- checks when a template is written ------------------------------------------------


def test_a_syntax_error_is_template_invalid_with_its_line() -> None:
    source = "Hello {{ registration.name }},\n\nsee you {{ event.name }\n" + "filler " * 200
    with pytest.raises(errors.TemplateInvalid) as refused:
        check_template(source, field="body")
    assert refused.value.fields == {"field": "body", "line": 3}
    assert "line 3" in refused.value.detail
    assert "filler filler" not in refused.value.detail


def test_an_unknown_filter_is_template_invalid() -> None:
    with pytest.raises(errors.TemplateInvalid) as refused:
        check_template("a\n{{ registration.name|shout }}", field="subject")
    assert refused.value.fields == {"field": "subject", "line": 2}


def test_a_top_level_name_outside_the_context_is_refused() -> None:
    with pytest.raises(errors.TemplateVariableUnknown) as refused:
        check_template("Hello {{ user.name }}", field="body")
    assert refused.value.fields == {"field": "body", "variable": "user"}


@pytest.mark.parametrize(
    ("source", "variable"),
    [
        ("{{ registration.nickname }}", "registration.nickname"),
        ("{{ event['organizer'] }}", "event.organizer"),
        ("{% if ticket %}{{ ticket.price }}{% endif %}", "ticket.price"),
    ],
)
def test_an_undocumented_field_of_a_context_root_is_refused(source: str, variable: str) -> None:
    with pytest.raises(errors.TemplateVariableUnknown) as refused:
        check_template(source, field="body")
    assert refused.value.fields == {"field": "body", "variable": variable}


def test_names_bound_in_the_template_are_not_reported() -> None:
    check_template(
        "{% set greeting = 'Hi' %}{% set ns = namespace(n=0) %}{% set ns.n = 1 %}"
        "{% for item in [1, 2] %}{{ item }}{{ loop.index }}{% endfor %}"
        "{% macro card(who) %}{{ who }}{{ varargs }}{{ caller() }}{% endmacro %}"
        "{% call card(registration.name) %}x{% endcall %}{{ greeting }}"
        "{% with place = event.location %}{{ place }}{% endwith %}"
        "{% set event = dict(organizer='me') %}{{ event.organizer }}",
        field="body",
    )


def test_documented_fields_deeper_attributes_and_safe_globals_pass() -> None:
    check_template(
        "{{ registration.name }} {{ registration['email'] }} {{ event.date_begin.year }}"
        " {{ event.date_begin.strftime('%d %B') }} {{ slot.date_end }} {{ links.ics }}"
        " {{ range(3)|list }} {{ dict(a=1) }} {{ cycler('a').next() }} {{ joiner()() }}"
        " {{ namespace(a=1).a }}",
        field="body",
    )


def test_lipsum_is_not_available() -> None:
    with pytest.raises(errors.TemplateVariableUnknown) as refused:
        check_template("{{ lipsum(10) }}", field="body")
    assert refused.value.fields["variable"] == "lipsum"


def test_a_template_cannot_load_another() -> None:
    with pytest.raises(errors.TemplateInvalid):
        check_template("{% include 'other.txt' %}", field="body")


def chains(terms: int, lines: int) -> str:
    return ("{{ " + "+".join(["1"] * terms) + " }}\n") * lines


def test_the_long_plus_chains_of_issue_26_are_too_complex_and_refused_at_once() -> None:
    source = chains(150, 32)  # 9.9 KB: 15 s to check before (quadratic compile)
    started = time.monotonic()
    with pytest.raises(errors.TemplateTooComplex) as refused:
        check_template(source, field="body")
    assert time.monotonic() - started < 1.0
    assert refused.value.fields["limit"] in ("nodes", "depth")  # it passes both
    with pytest.raises(errors.TemplateTooComplex) as refused:
        check_template(chains(40, 200), field="body")  # shallow, but 16 000 nodes
    assert refused.value.fields == {"field": "body", "limit": "nodes", "max": MAX_NODES}


def test_a_template_nested_too_deeply_names_the_depth_limit() -> None:
    for source in (chains(MAX_TREE_DEPTH + 5, 1), "{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}"):
        with pytest.raises(errors.TemplateTooComplex) as refused:
            check_template(source, field="subject")
        assert refused.value.fields == {"field": "subject", "limit": "depth", "max": 64}


def test_a_large_text_stops_parsing_at_the_token_cap() -> None:
    started = time.monotonic()
    with pytest.raises(errors.TemplateTooComplex) as refused:
        check_template("{{ x }}" * 14_000, field="body")  # 98 KB, 42 000 tokens
    assert time.monotonic() - started < 2.0
    assert refused.value.fields["limit"] == "nodes"


def test_a_template_just_within_the_limits_is_checked_and_compiled_in_linear_time() -> None:
    source = chains(60, 40)  # 4 802 nodes, 61 deep: what the limits still admit
    started = time.monotonic()
    check_template(source, field="body")
    compiled = compile_template(source)
    assert time.monotonic() - started < 3.0
    assert render(compiled, CONTEXT) == "\n".join(["60"] * 40)  # Jinja drops the last newline


def test_compiling_a_stored_template_over_the_limits_is_render_failed() -> None:
    for source, reason in (
        (chains(40, 200), f"over {MAX_NODES} nodes"),
        (chains(100, 1), f"nested over {MAX_TREE_DEPTH} deep"),
        ("{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}", "nested too deeply"),
    ):
        with pytest.raises(RenderFailed) as failure:
            compile_template(source)
        assert (failure.value.kind, failure.value.reason) == ("TemplateTooComplex", reason)


# --- bounded rendering -------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "{% for c in 'a' * 10001 %}{% endfor %}",
        "{% for x in [0] * 10001 %}{% endfor %}",
        "{% for x in ['a', 'b']|batch(1)|list * 5001 %}{% endfor %}",
    ],
)
def test_a_loop_over_more_than_ten_thousand_items_fails(source: str) -> None:
    assert fails(source).reason == "loop over 10000 items"


def test_a_range_over_more_than_ten_thousand_items_fails() -> None:
    assert fails("{{ range(10001)|list|length }}").reason == "range over 10000 items"
    assert fails("{{ range(10 ** 30)|length }}").reason == "range over 10000 items"


def test_nested_loops_share_one_item_budget() -> None:
    source = "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
    assert fails(source).reason == "over 100000 loop and range items"


def test_a_render_that_runs_past_its_deadline_fails() -> None:
    assert fails(BURNS_DEADLINE).reason == f"deadline of {DEADLINE_SECONDS:g} s"


def test_a_sum_of_lists_is_timed_as_it_grows() -> None:
    assert fails("{{ ([[0]] * 30000)|sum(start=[]) }}").reason.startswith("deadline")


def test_output_over_the_cap_fails() -> None:
    failure = fails("{% for i in range(3000) %}{{ registration.name * 10 }}{% endfor %}")
    assert failure.reason == f"output over {MAX_OUTPUT} bytes"


def test_the_output_cap_counts_bytes_not_characters() -> None:
    # over a quarter of the cap in characters, at four bytes each in UTF-8: over the cap
    rounds = MAX_OUTPUT // 400 + 20
    failure = fails("{% for i in range(" + str(rounds) + ") %}" + "😀" * 100 + "{% endfor %}")
    assert failure.reason == f"output over {MAX_OUTPUT} bytes"


async def test_a_batch_of_recipients_shares_one_deadline() -> None:
    # each render alone is well inside the deadline; the batch together is not
    slow = compile_template("{% for i in range(9000) %}{{ registration.name|upper }}{% endfor %}")
    times = []
    for _ in range(3):
        started = time.monotonic()
        render(slow, CONTEXT)
        times.append(time.monotonic() - started)
    n = int(3 * DEADLINE_SECONDS / min(times)) + 2  # three deadlines' worth, were each alone
    with pytest.raises(RenderFailed) as failure:
        await render_pairs(slow, compile_template("s"), [CONTEXT] * n)
    assert failure.value.reason.startswith("deadline")


def test_output_at_the_cap_renders() -> None:
    source = "{{ 'x' * " + str(MAX_OUTPUT) + " }}"
    assert len(render(compile_template(source), CONTEXT)) == MAX_OUTPUT


TOO_BIG = f"value over {MAX_OUTPUT} characters"


@pytest.mark.parametrize(
    "source",
    [
        "{{ 'a' * 10 ** 9 }}",
        "{{ [0] * 10 ** 9 }}",
        "{{ registration.name * 10 ** 9 }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}",
        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
        "{% endfor %}",
        "{% set a = ['x' * 100000] * 2 %}{% set b = [a, a, a, a] %}{{ b|length }}",
        "{% macro m() %}{% for i in range(9000) %}" + "x" * 40 + "{% endfor %}{% endmacro %}"
        "{{ m()|length }}",
    ],
)
def test_a_value_over_the_cap_fails_before_it_is_built(source: str) -> None:
    assert fails(source).reason == TOO_BIG


def test_a_huge_power_fails_before_it_is_computed() -> None:
    assert fails("{{ 10 ** (10 ** 8) }}").reason == "integer over 16384 bits"
    assert fails("{{ (2 ** 10000) * (2 ** 10000) }}").reason == "integer over 16384 bits"


@pytest.mark.parametrize(
    "source",
    [
        "{{ '%999999999d' % 1 }}",
        "{{ '%.999999999f' % 1.5 }}",
        "{{ '{:999999999}'.format(1) }}",
        "{{ '{:{}}'.format(1, 999999999) }}",
        "{{ '{x:999999999}'.format_map({'x': 1}) }}",
        "{{ ('{:999999999}'|attr('format'))(1) }}",
        "{{ '%999999999s'|format(1) }}",
    ],
)
def test_a_huge_format_width_fails_before_it_is_built(source: str) -> None:
    assert fails(source).reason == TOO_BIG


def test_a_star_width_in_a_percent_format_fails() -> None:
    assert fails("{{ '%*d' % (999999999, 1) }}").reason == "'*' width in a % format"


@pytest.mark.parametrize(
    "source",
    [
        "{{ 'x'|center(999999999) }}",
        "{{ 'x\ny'|indent(999999999, true) }}",
        "{{ 'a b'|wordwrap(1, wrapstring='x' * 200000) }}",
        "{{ 'aaa'|replace('a', 'x' * 200000) }}",
        "{{ range(5000)|join('x' * 100000) }}",
        "{{ [1]|batch(999999999, 0)|list }}",
        "{{ [1]|slice(999999999)|list }}",
        "{{ [[[[[[[[[[[[1]]]]]]]]]]]]|tojson(indent=999999) }}",
    ],
)
def test_a_filter_with_a_size_argument_fails_before_building(source: str) -> None:
    assert fails(source).reason == TOO_BIG


@pytest.mark.parametrize(
    "source",
    [
        "{{ 'x'.center(999999999) }}",
        "{{ 'x'.ljust(999999999) }}",
        "{{ 'x'.rjust(999999999) }}",
        "{{ '1'.zfill(999999999) }}",
        "{{ ('\t' * 1000).expandtabs(999999) }}",
        "{{ 'aaa'.replace('a', 'x' * 200000) }}",
        "{{ ('x' * 100000).join(['a', 'b', 'c', 'd']) }}",
    ],
)
def test_a_str_method_with_a_size_argument_fails_before_building(source: str) -> None:
    assert fails(source).reason == TOO_BIG


def test_appending_to_a_list_is_bounded() -> None:
    source = (
        "{% set items = [] %}{% for i in range(1000) %}"
        "{% if items.append(registration.name * 10000) %}{% endif %}{% endfor %}"
    )
    assert fails(source).reason == "containers grown by over 1048576 characters"


@pytest.mark.parametrize(
    "source",
    [
        "{% macro again(n) %}{{ again(n + 1) }}{% endmacro %}{{ again(0) }}",
        "{% for x in [0] recursive %}{{ loop([0, 0]) }}{% endfor %}",
    ],
)
def test_recursion_fails_at_the_nesting_limit(source: str) -> None:
    assert fails(source).reason == "calls nested over 32 deep"


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ registration.name.encode() }}",
        "{{ registration.name.translate({65: 'x' * 100000}) }}",
    ],
)
def test_sandbox_escapes_fail(source: str) -> None:
    assert fails(source).reason == "SecurityError"


def test_division_by_zero_fails_with_a_safe_message() -> None:
    failure = fails("Dear {{ registration.name }},\n{{ 1 // (event.name|length * 0) }}")
    assert str(failure) == "ZeroDivisionError at template line 2"
    assert (failure.kind, failure.line) == ("ZeroDivisionError", 2)


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("{{ int(registration.name) }}", "ValueError"),
        ("{{ {}[registration.email] }}", "UndefinedError"),
        ("{{ ('{' ~ registration.name ~ '}').format() }}", "KeyError"),
        ("{{ registration.barcode|int // 0 }}", "ZeroDivisionError"),
    ],
)
def test_an_error_quoting_attendee_data_is_not_echoed(source: str, kind: str) -> None:
    # int('Alice Martin') raises "invalid literal for int() ... 'Alice Martin'"
    failure = fails(source, {**CONTEXT, "int": int})
    assert str(failure) == f"{kind} at template line 1"
    assert failure.reason == kind


def test_a_template_that_does_not_compile_is_render_failed() -> None:
    with pytest.raises(RenderFailed) as failure:
        compile_template("ok\n{% for %}")
    assert (failure.value.kind, failure.value.line) == ("TemplateSyntaxError", 2)


def test_templates_render_only_through_render() -> None:
    with pytest.raises(RuntimeError):
        compile_template("{{ registration.name }}").render(CONTEXT)


BENIGN = [
    "Hello {{ registration.name }}",
    "{% for i in range(3) %}{{ i }}{% endfor %}",
    "{{ event.date_begin.strftime('%d %B %Y') }} to {{ event.date_end.strftime('%H:%M') }}",
    "{{ links.ics }}|{{ links.my_tickets }}",
    "{% if ticket %}{{ ticket.name }}{% endif %}",
    "{% if slot %}{{ slot.date_begin }}{% endif %}",
    "{{ registration.name|upper }} {{ registration.company_name or '-' }} {{ nope|default('d') }}",
    "{{ [registration.name, event.name]|join(', ') }} {{ [1, 2, 3]|sum }}",
    "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}/{{ loop.length }}{{ loop.cycle('+', '-') }}"
    "{% if not loop.last %}, {% endif %}{% else %}none{% endfor %}",
    "{% for x in range(10) if x is odd %}{{ x }}{% endfor %}",
    "{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}"
    "{{ ns.n }}",
    "{% macro b(x) %}<{{ x }}>{% endmacro %}{{ b(registration.name) }}",
    "{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}{{ event.name }}{% endcall %}",
    "{{ '%s <%s>' % (registration.name, registration.email) }} {{ '%05.1f' % 3.14159 }}",
    "{{ '{} at {}'.format(event.name, event.location) }} {{ '{:>8}'.format('x') }}",
    "{{ '{a}'.format_map({'a': event.name}) }} {{ '%(n)s'|format(n=1) }} {{ '%d'|format(7) }}",
    "{{ registration.name ~ ' / ' ~ event.name ~ 1 }}",
    "{{ event.name|center(30) }}|{{ 'a\nb'|indent(2, true) }}|{{ event.name|wordwrap(7) }}",
    "{{ event.name|truncate(9) }} {{ event.name|replace('o', '0') }} {{ 'ab'|replace('', '-') }}",
    "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|slice(2)|list }}",
    "{{ (event.date_end - event.date_begin).seconds }} {{ event.date_begin.year }}",
    "{% filter upper %}x{{ registration.name }}{% endfilter %}",
    "{% set greeting %}Hi {{ registration.name }}{% endset %}{{ greeting }}",
    "{% for x in [[1, [2]], [3]] recursive %}{% if x is iterable %}({{ loop(x) }}){% else %}"
    "{{ x }}{% endif %}{% endfor %}",
    "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}"
    "{% set j = joiner(', ') %}{% for x in 'abc' %}{{ j() }}{{ x }}{% endfor %}",
    "{{ dict(b=2, a=1)|dictsort }} {{ event.date_begin|string }} {{ {'k': [1, (2, 3)]} }}",
    "{{ 2 ** 10 }} {{ 7 % 3 }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 3 * 4 }} {{ -2 ** 3 }}",
    "{{ ('a'|safe) ~ '<b>' }} {{ ('{}'|safe).format('<i>') }} {{ ('%s'|safe) % '<u>' }}",
    "{% autoescape true %}{{ '<' ~ registration.name }}{{ '<' }}{% endautoescape %}",
    "{{ registration.name.center(20, '*') }} {{ '7'.zfill(3) }} {{ '-'.join(['a', 'b']) }}",
    "{{ 'a\tb'.expandtabs(4) }} {{ 'x y'.split()|list }} {{ registration.name.replace('A', 'a') }}",
    "{{ {'a': 1}|tojson }} {{ [1, [2]]|tojson(indent=2) }} {{ range(3)|map('string')|join }}",
    "{{ ['b', 'a']|sort|first }} {{ [3, 1]|max }} {{ 'abc'|list|reverse|join }} {{ 'x'|e }}",
    "{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %} {{ [1, 2]|unique|list }}",
    "Line one\n{% for r in range(2) %}  row {{ r }}\n{% endfor %}end\n",
    "{% for i in range(2) %}{{ 'x'.center(5, '.') }}{{ 'aa'.replace('a', 'b', 1) }}"
    "{{ '\t'.expandtabs(tabsize=2) }}{{ ','.join(['a', 'b']) }}{{ '{}'.format(i) }}{% endfor %}",
]


@pytest.mark.parametrize("source", BENIGN)
def test_a_benign_template_renders_exactly_as_plain_jinja(source: str) -> None:
    assert render(compile_template(source), CONTEXT) == plain(source, CONTEXT)


def test_a_missing_ticket_or_slot_renders_as_plain_jinja() -> None:
    context = {**CONTEXT, "ticket": None, "slot": None}
    source = "{% if ticket %}{{ ticket.name }}{% else %}none{% endif %}{{ slot is none }}"
    assert render(compile_template(source), context) == plain(source, context) == "noneTrue"


async def test_render_pairs_renders_subject_and_body_per_context() -> None:
    subject = compile_template("Your ticket for {{ event.name }}")
    body = compile_template("Hello {{ registration.name }}")
    other = {**CONTEXT, "registration": {**CONTEXT["registration"], "name": "Bob"}}
    pairs = await render_pairs(subject, body, [CONTEXT, other])
    assert pairs == [
        ("Your ticket for Spring Conference", "Hello Alice Martin"),
        ("Your ticket for Spring Conference", "Hello Bob"),
    ]


async def test_render_pairs_lets_other_tasks_run_while_a_template_burns_its_deadline() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    try:
        with pytest.raises(RenderFailed) as failure:
            await render_pairs(compile_template(BURNS_DEADLINE), compile_template("ok"), [CONTEXT])
    finally:
        task.cancel()
    assert failure.value.reason.startswith("deadline")
    assert time.monotonic() - started < DEADLINE_SECONDS + 2.0
    assert ticks >= 50  # the event loop kept turning the whole time


async def test_a_hostile_render_does_not_spend_another_renders_budget() -> None:
    hostile = render_pairs(compile_template(BURNS_DEADLINE), compile_template(""), [CONTEXT])
    benign = compile_template("{% for i in range(9000) %}.{% endfor %}{{ registration.name }}")
    results = await asyncio.gather(
        hostile,
        *(render_pairs(benign, benign, [CONTEXT]) for _ in range(3)),
        return_exceptions=True,
    )
    assert isinstance(results[0], RenderFailed)
    assert all(r == [("." * 9000 + "Alice Martin",) * 2] for r in results[1:])
