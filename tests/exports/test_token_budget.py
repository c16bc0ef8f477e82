"""Token budgets: rows measured by rendering the tokenizer's chat template, cut or left out."""

from __future__ import annotations

import pytest

from tests.fixtures.tokenizer import save_word_tokenizer
from trajectory_assets.config import ConfigError, load_config
from trajectory_assets.exports.token_budget import TokenBudget, TokenizerError, load_counter, renderable
from trajectory_assets.exports.unrepresentable import Unrepresentable

# with the word tokenizer: "<|im_start|>role" + one token per word + "<|im_end|>"
USER = {"role": "user", "content": "what is two plus two"}  # 7 tokens
CALL = {"role": "assistant", "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}]}  # 5
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "four"}  # 3
ANSWER = {"role": "assistant", "content": "it is four"}  # 5
CONVERSATION = [USER, CALL, RESULT, ANSWER]  # 20


@pytest.fixture(scope="module")
def counter(tmp_path_factory):
    return load_counter(save_word_tokenizer(tmp_path_factory.mktemp("tokenizer")))


def test_a_row_is_measured_as_its_chat_template_renders_it(counter):
    assert [counter.count([m], None) for m in CONVERSATION] == [7, 5, 3, 5]
    assert counter.count(CONVERSATION, None) == 20
    # measured as the trainer flavors deliver the row: arguments as the object they encode,
    # not the OpenAI string that `| tojson` would double-encode
    as_stored = counter.tokenizer.apply_chat_template([USER, CALL], tokenize=False)
    assert '<tool_call> "{\\"a\\": 2}"' in as_stored
    measured = counter.tokenizer.apply_chat_template(renderable([USER, CALL]), tokenize=False)
    assert '<tool_call> {"a": 2} <|im_end|>' in measured


def test_a_prompt_is_measured_with_the_generation_prompt(counter):
    assert TokenBudget(counter, None, False).prompt([USER], None) == 8


def test_a_row_within_budget_is_kept_whole(counter):
    assert TokenBudget(counter, 20, False).fit([], CONVERSATION, None) == (CONVERSATION, 20, False)


def test_without_a_budget_rows_are_only_measured(counter):
    assert TokenBudget(counter, None, False).fit([], CONVERSATION, None) == (CONVERSATION, 20, False)


def test_over_budget_a_row_is_left_out(counter):
    with pytest.raises(Unrepresentable) as error:
        TokenBudget(counter, 19, False).fit([], CONVERSATION, None)
    assert error.value.reason == "over_token_budget"


@pytest.mark.parametrize("budget, kept", [(19, 2), (12, 2), (11, 0)])
def test_truncation_cuts_after_the_last_assistant_turn_that_fits(counter, budget, kept):
    fit = TokenBudget(counter, budget, True)
    if not kept:  # the first assistant turn alone is over budget: nothing to keep
        with pytest.raises(Unrepresentable, match="first turn"):
            fit.fit([], CONVERSATION, None)
        return
    messages, tokens, cut = fit.fit([], CONVERSATION, None)
    assert messages == CONVERSATION[:kept] and tokens == 12 and cut


def test_truncation_keeps_the_context_whole(counter):
    messages, tokens, cut = TokenBudget(counter, 13, True).fit([USER], CONVERSATION[1:], None)
    assert messages == [CALL] and tokens == 12 and cut


def test_a_prompt_over_budget_is_left_out_never_cut(counter):
    with pytest.raises(Unrepresentable):
        TokenBudget(counter, 7, True).prompt([USER], None)


def test_a_row_the_template_refuses_is_a_template_error(tmp_path):
    refusing = save_word_tokenizer(tmp_path, "{% if messages | length > 1 %}{{ raise_exception('one message only') }}"
                                             "{% endif %}{{ messages[0].content }}")
    counter = load_counter(refusing)
    assert counter.count([USER], None) == 5
    with pytest.raises(Unrepresentable) as error:
        counter.count(CONVERSATION, None)
    assert error.value.reason == "chat_template_error" and "one message only" in error.value.detail


def test_a_missing_tokenizer_fails_in_one_line(tmp_path):
    with pytest.raises(TokenizerError, match="cannot be loaded") as error:
        load_counter(str(tmp_path / "nowhere"))
    assert "\n" not in str(error.value)


def test_a_tokenizer_without_chat_template_is_refused(tmp_path):
    with pytest.raises(TokenizerError, match="no chat template"):
        load_counter(save_word_tokenizer(tmp_path, chat_template=None))


@pytest.mark.parametrize("text, message", [
    ("sft:\n  over_token_budget: truncate\n", "needs `tokenizer`"),
    ("tokenizer: t\ngrpo:\n  over_token_budget: truncate\n", "would cut a task's prompt"),
])
def test_config_refuses_truncation_it_cannot_do(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_checking_a_tokenizer_gives_the_loaders_one_line_reason(tmp_path):
    from trajectory_assets.exports.token_budget import check_tokenizer

    with pytest.raises(TokenizerError) as error:
        check_tokenizer(str(tmp_path / "nowhere"))
    with pytest.raises(TokenizerError) as loaded:
        load_counter(str(tmp_path / "nowhere"))
    assert str(error.value) == str(loaded.value)
    with pytest.raises(TokenizerError, match="no chat template"):
        check_tokenizer(save_word_tokenizer(tmp_path / "plain", chat_template=None))


def test_checking_a_usable_tokenizer_leaves_transformers_out_of_the_checking_process(tmp_path):
    import subprocess
    import sys

    tokenizer = save_word_tokenizer(tmp_path / "words")
    probe = ("import sys; from trajectory_assets.exports.token_budget import check_tokenizer; "
             f"check_tokenizer({tokenizer!r}); print('transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
