"""The research agents' prompts: each is short enough to read in two minutes,
names the tools of its allowlist that its job turns on, never tells the agent to call a tool
it does not have, and says what its output must contain and when to stop with a blocker."""
import re

import pytest

from services.agents.toolbox import TOOLS
from services.claude import loader

WORD_LIMIT = 450  # about two minutes of reading

# The tools each prompt must name (and the agent must have): the ones its job turns on.
TOOLS_THAT_MATTER = {
    "experiment-planner": {"get_experiment", "list_events", "repo_list_files", "repo_read_file", "repo_search",
                           "git_log", "git_show", "search_experiments", "read_experiment", "ask_questions",
                           "submit_plan", "web_search", "web_fetch"},
    "experiment-orchestrator": {"get_plan", "code_step", "launch_pods", "wait_for_pods", "list_pods",
                                "read_pod_logs", "send_crash_to_code", "list_artifacts", "read_artifact",
                                "repo_read_file", "repo_search", "git_log", "spawn_agent", "set_status"},
    "analyzer": {"get_plan", "list_artifacts", "read_artifact", "run_analysis", "read_pod_logs", "repo_read_file",
                 "repo_search", "search_experiments", "read_experiment", "write_clean_result", "set_status",
                 "web_search", "web_fetch"},
    "interpretation-critic": {"get_plan", "list_artifacts", "read_artifact", "repo_read_file", "repo_search",
                              "git_show", "search_experiments", "read_experiment"},
    "clean-result-critic": {"get_plan", "list_artifacts", "read_artifact", "repo_read_file", "read_experiment"},
}
# The API's server tools: offered only when web research is on in Settings, so prompts name
# them "when offered".
OFFERED_WHEN_ON = {"web_search", "web_fetch"}
PLAN_SECTIONS = ("Goal", "Hypothesis", "Prediction", "Kill Criterion", "Experimental Setup",
                 "Compute and Hardware", "Artifacts", "Verification", "Risks and Red Team",
                 "Likely Clean Result", "Approval Checklist")
CONFIDENCE = ('"(LOW confidence)"', '"(MODERATE confidence)"', '"(HIGH confidence)"')


def _words(prompt: str) -> str:
    """The prompt with its line breaks and runs of spaces as single spaces."""
    return " ".join(prompt.split())


def _named_tools(prompt: str) -> set[str]:
    return {name for name in re.findall(r"`([a-z_]+)`", prompt) if name in TOOLS or name in OFFERED_WHEN_ON}


@pytest.mark.parametrize("name", sorted(TOOLS_THAT_MATTER))
def test_each_prompt_is_short_enough_to_read_in_two_minutes(name):
    words = len(loader.get(name).prompt.split())
    assert words <= WORD_LIMIT, f"{name}'s prompt has {words} words (limit {WORD_LIMIT})"


@pytest.mark.parametrize("name", sorted(TOOLS_THAT_MATTER))
def test_each_prompt_names_the_tools_its_job_turns_on(name):
    definition = loader.get(name)
    wanted = TOOLS_THAT_MATTER[name]
    assert wanted <= set(definition.tools), f"{name} lacks {sorted(wanted - set(definition.tools))}"
    assert wanted <= _named_tools(definition.prompt), f"{name}'s prompt never names " \
                                                       f"{sorted(wanted - _named_tools(definition.prompt))}"


@pytest.mark.parametrize("name", loader.names())
def test_no_prompt_asks_for_a_tool_the_agent_lacks(name):
    """Every backticked tool name in a shipped prompt is on its allowlist (or offered by the API)."""
    definition = loader.get(name)
    extra = _named_tools(definition.prompt) - set(definition.tools) - OFFERED_WHEN_ON
    assert not extra, f"{name}'s prompt names {sorted(extra)}, which are not on its tools: line"


def test_the_planner_knows_the_eleven_sections_in_order_grounded_commands_and_cost():
    prompt = _words(loader.get("experiment-planner").prompt)
    at = prompt.find("Goal,")
    for section in PLAN_SECTIONS:  # each after the one before it, in the plan's order
        at = prompt.find(section, at)
        assert at >= 0, f"{section} missing or out of order"
    assert "really parses" in prompt and "runpod-spec" in prompt
    assert "$1.49" in prompt and "$2.69" in prompt and "total" in prompt
    assert "blocker plan" in prompt and "#<number>" in prompt


def test_the_analyzer_and_the_clean_result_critic_know_what_a_clean_result_shows():
    """SPEC §8.1: a one-sentence finding with a confidence suffix, a primary figure, the numbers
    behind every claim, limitations."""
    for name in ("analyzer", "clean-result-critic"):
        prompt = _words(loader.get(name).prompt)
        assert all(suffix in prompt for suffix in CONFIDENCE), name
        assert '<figure id="figure">' in prompt and "one sentence" in prompt, name
        assert "numbers behind every claim" in prompt and "limitations" in prompt, name
        assert all(bullet in prompt for bullet in ("Motivation", "What I ran", "Results", "Next steps")), name
    assert "artifact:NAME" in loader.get("analyzer").prompt


def test_the_agents_that_can_stop_say_when_to_stop_with_a_blocker():
    for name in ("experiment-planner", "experiment-orchestrator", "analyzer"):
        assert "Stop with a blocker" in loader.get(name).prompt, name
    orchestrator = _words(loader.get("experiment-orchestrator").prompt)
    assert "recovery budget" in orchestrator and "vanished" in orchestrator and "traceback" in orchestrator
