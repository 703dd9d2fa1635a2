"""The runpod-spec rules (services.dispatch.spec), one field at a time, with no database.

Each test names the exact problem text a planner reads, so a change to the wording or to the
order problems are listed in is a visible change, not an accident of a refactor."""
from __future__ import annotations

from services.dispatch import spec

H100 = {"gpuType": "H100"}
ARTIFACT_HINT = ("must be a path or glob relative to the checkout (runs/x/*.json), a /workspace/… path, or an "
                 "hf://, wandb://, https:// or repo:// URI")
KNOWN = "H100, H200, A100, L40S, RTX4090, A100-SXM, A100-SXM4-80GB, H100-SXM, RTX 4090"


def problems_of(pod: dict, account: str | None = None) -> list[str]:
    return spec.validate(pod, account=account).problems


def policy_problems(policy, account: str | None = None, **pod) -> list[str]:
    """The problems of a 2 × RTX 4090 pod with this substitution policy."""
    return problems_of({"gpuType": "RTX 4090", "gpuCount": 2, **pod, "substitution_policy": policy}, account)


def test_a_spec_is_an_object_or_a_non_empty_array_of_at_most_64_pods():
    """Is a scalar or an empty array refused outright, and a 65-pod array refused but still checked?"""
    assert spec.validate("H100").problems == ["runpod-spec must be a JSON object (one pod) or an array of pods"]
    assert spec.validate("H100").pods == []
    assert spec.validate([]).problems == ["runpod-spec array is empty"]
    too_many = spec.validate([H100] * 64 + [{}])
    assert too_many.problems == ["runpod-spec has 65 pods; the limit is 64", "[64].gpuType: required"]
    assert len(too_many.pods) == 65
    one = spec.validate(H100)
    assert one.ok and one.pods == [H100] and one.unknown_fields == []


def test_each_pod_is_an_object_with_a_short_unique_name_and_unknown_fields_are_listed():
    """Are a non-object pod, a duplicate, blank or overlong name refused, and unknown fields kept apart?"""
    check = spec.validate([H100, 3, {**H100, "name": "a"}, {**H100, "name": "a"}, {**H100, "name": " "},
                           {**H100, "name": "x" * 121}, {"extra": 1, **H100}])
    assert check.problems == ["[1]: must be an object", "[3].name: duplicate pod name 'a'",
                              "[4].name: must be text of 1–120 characters",
                              "[5].name: must be text of 1–120 characters"]
    assert check.unknown_fields == ["[6].extra"]


def test_the_gpu_type_is_required_and_known_by_short_name_alias_or_provider_id():
    """Is a missing or unknown GPU refused naming the known ones, and an alias or provider id accepted?"""
    assert problems_of({}) == ["[0].gpuType: required"]
    assert problems_of({"gpuType": "B300"}) == [f'[0].gpuType: unknown GPU "B300"; known: {KNOWN}']
    assert problems_of({"gpuType": ["H100"]}) == [f'[0].gpuType: unknown GPU ["H100"]; known: {KNOWN}']
    assert problems_of({"gpuType": " rtx  4090 "}) == [] and problems_of({"gpuType": "NVIDIA H200"}) == []


def test_whole_number_fields_have_their_minimums_and_booleans_are_not_numbers():
    """Does each counted field refuse a fraction, text, a boolean or a value under its minimum?"""
    assert problems_of({**H100, "gpuCount": 0, "volumeGb": -1, "containerDiskGb": True, "estimatedMinutes": 1.5,
                        "keepAliveMinutes": "3", "bootstrapSilenceMinutes": 0}) == [
        "[0].gpuCount: must be at least 1, got 0",
        "[0].volumeGb: must be at least 0, got -1",
        "[0].containerDiskGb: must be a whole number, got true",
        "[0].estimatedMinutes: must be a whole number, got 1.5",
        '[0].keepAliveMinutes: must be a whole number, got "3"',
        "[0].bootstrapSilenceMinutes: must be at least 1, got 0"]
    assert problems_of({**H100, "gpuCount": 8, "volumeGb": 0, "containerDiskGb": 1, "estimatedMinutes": 1,
                        "keepAliveMinutes": 0, "bootstrapSilenceMinutes": 1}) == []


def test_cloud_type_env_strings_and_secret_names_have_their_shapes():
    """Are an unknown cloud type, a non-string env value, non-string args or image and a bad secret name refused?"""
    assert problems_of({**H100, "cloudType": "CHEAP", "env": {"A": 1}, "dockerArgs": 3, "image": None,
                        "secrets": ["hf_token"]}) == [
        "[0].cloudType: must be one of SECURE, COMMUNITY",
        "[0].env: must map names to string values",
        "[0].dockerArgs: must be a string",
        "[0].image: must be a string",
        "[0].secrets: must be a list of environment variable names like HF_TOKEN"]
    assert problems_of({**H100, "secrets": "HF_TOKEN"}) == [
        "[0].secrets: must be a list of environment variable names like HF_TOKEN"]
    assert problems_of({**H100, "cloudType": "COMMUNITY", "env": {"SEEDS": "5"}, "dockerArgs": "", "image": "x",
                        "secrets": ["HF_TOKEN"]}) == []


def test_consolidation_that_asks_to_merge_is_refused_rather_than_ignored():
    """Is `"may_merge_pods": true` a problem, with the path, that says Sagan never merges pods?"""
    assert problems_of({**H100, "consolidation": {"may_merge_pods": True, "merge_target_max_gpus_per_pod": 4}}) == [
        "[0].consolidation: not supported — Sagan never merges pods onto a larger GPU; remove the field or set "
        "may_merge_pods to false (each pod runs as specified, and substitution_policy lists the GPUs it may move to)"]


def test_consolidation_that_says_do_not_merge_is_what_sagan_does_and_is_kept():
    """The old system's `{"may_merge_pods": false, "merge_target_max_gpus_per_pod": 1}` passes, stays in the
    spec, and an unknown key inside it is listed like any unknown field."""
    old_way = {**H100, "consolidation": {"may_merge_pods": False, "merge_target_max_gpus_per_pod": 1}}
    check = spec.validate(old_way)
    assert check.ok and check.pods[0]["consolidation"] == {"may_merge_pods": False, "merge_target_max_gpus_per_pod": 1}
    assert spec.validate({**H100, "consolidation": {"may_merge_pods": False, "note": "x"}}).unknown_fields == [
        "[0].consolidation.note"]


def test_consolidation_must_say_false_in_so_many_words():
    """Is a consolidation block that is not an object, leaves may_merge_pods out, or says something other
    than false refused with its path — and a bad merge target too?"""
    assert problems_of({**H100, "consolidation": []}) == [
        '[0].consolidation: must be an object such as {"may_merge_pods": false}']
    assert problems_of({**H100, "consolidation": {}}) == [
        '[0].consolidation.may_merge_pods: required — say "may_merge_pods": false (Sagan never merges pods), '
        'or remove consolidation']
    assert problems_of({**H100, "consolidation": {"may_merge_pods": "no", "merge_target_max_gpus_per_pod": 0}}) == [
        '[0].consolidation.may_merge_pods: must be false (Sagan never merges pods), got "no"',
        "[0].consolidation.merge_target_max_gpus_per_pod: must be at least 1, got 0"]


def test_a_persistent_volume_is_none_or_at_least_runpods_floor():
    """RunPod refuses a persistent volume under 10 GB: is volumeGb 1–9 (or such a policy minimum) refused,
    and 0 (no volume) or 10 accepted?"""
    assert problems_of({**H100, "volumeGb": 5}) == [
        "[0].volumeGb: RunPod's smallest persistent volume is 10 GB; use 0 (none) or at least 10, got 5"]
    assert policy_problems({"volumeGb": {"min": 9}}) == [
        "[0].substitution_policy.volumeGb.min: RunPod's smallest persistent volume is 10 GB; use 0 (none) or at "
        "least 10, got 9"]
    assert problems_of({**H100, "volumeGb": 0}) == problems_of({**H100, "volumeGb": 10}) == []
    assert policy_problems({"volumeGb": {"min": 0}}) == policy_problems({"volumeGb": {"min": 10}}) == []


def test_config_is_an_object_with_a_text_command_and_safe_artifact_paths():
    """Are a non-object config, a non-text command and artifacts outside the checkout or /workspace refused?"""
    assert problems_of({**H100, "config": []}) == ["[0].config: must be an object"]
    assert problems_of({**H100, "config": {"command": 3, "artifacts": "x"}}) == [
        "[0].config.command: must be text", "[0].config.artifacts: must be a list of paths or URIs"]
    artifacts = ["runs/*.json", "/etc/passwd", "../x", "hf://a/b", "-rf", "/workspace/out", "", "a\nb", 3]
    assert problems_of({**H100, "config": {"artifacts": artifacts}}) == [
        f"[0].config.artifacts[{i}]: {ARTIFACT_HINT}" for i in (1, 2, 4, 6, 7, 8)]


def test_a_substitution_policy_is_an_object_and_an_empty_one_is_fine():
    """Is a list refused as the policy, and `{}` allowed?"""
    assert policy_problems([]) == ["[0].substitution_policy: must be an object"]
    assert policy_problems({}) == []


def test_the_gpu_policy_names_known_gpus_including_the_pods_own():
    """Are an empty or missing allowed list, an unknown GPU and a list without the pod's own GPU refused?"""
    refused = ["[0].substitution_policy.gpuType.allowed: must be a non-empty list of GPU names"]
    assert policy_problems({"gpuType": 3}) == refused
    assert policy_problems({"gpuType": {"allowed": []}}) == refused
    assert policy_problems({"gpuType": {}}) == refused
    assert policy_problems({"gpuType": {"allowed": ["H100", "B300"]}}) == [
        f'[0].substitution_policy.gpuType.allowed[1]: unknown GPU "B300"; known: {KNOWN}',
        "[0].substitution_policy.gpuType.allowed: does not include the spec's own GPU 'RTX 4090'"]
    assert policy_problems({"gpuType": {"allowed": ["RTX4090", "H100-SXM"]}}) == []


def test_the_minimum_vram_is_positive_and_met_by_an_allowed_gpu_and_the_pods_own():
    """Is min_vram_gb refused when not a positive number, above every allowed GPU, or above the pod's own?"""
    allowed = ["RTX4090", "H100"]
    path = "[0].substitution_policy.gpuType.min_vram_gb"
    for bad in (True, 0, -3, "40"):
        assert policy_problems({"gpuType": {"allowed": allowed, "min_vram_gb": bad}}) == [
            f"{path}: must be a positive number"]
    assert policy_problems({"gpuType": {"allowed": allowed, "min_vram_gb": 200}}) == [
        f"{path}: no allowed GPU has 200 GB"]
    assert policy_problems({"gpuType": {"allowed": allowed, "min_vram_gb": 40}}) == [
        f"{path}: the spec's own GPU 'RTX 4090' has 24 GB, less than 40"]
    assert policy_problems({"gpuType": {"allowed": allowed, "min_vram_gb": 24}}) == []
    assert policy_problems({"gpuType": {"allowed": allowed, "min_vram_gb": 23.5}}) == []


def test_the_minimum_vram_of_an_unknown_gpu_is_checked_against_the_allowed_ones_only():
    """With an unknown own GPU, is only the allowed list measured against min_vram_gb?"""
    check = spec.validate({"gpuType": "B300",
                           "substitution_policy": {"gpuType": {"allowed": ["H100"], "min_vram_gb": 100}}})
    assert check.problems == [f'[0].gpuType: unknown GPU "B300"; known: {KNOWN}',
                              "[0].substitution_policy.gpuType.min_vram_gb: no allowed GPU has 100 GB"]
    check = spec.validate({"gpuType": "H100",
                           "substitution_policy": {"gpuType": {"allowed": ["B300"], "min_vram_gb": 100}}})
    assert check.problems == [f'[0].substitution_policy.gpuType.allowed[0]: unknown GPU "B300"; known: {KNOWN}',
                              "[0].substitution_policy.gpuType.min_vram_gb: the spec's own GPU 'H100' has 80 GB, "
                              "less than 100"]


def test_the_gpu_count_policy_is_an_ordered_range_around_the_pods_own_count():
    """Are bounds that are not whole numbers ≥ 1, an inverted range and a range without the pod's count refused?"""
    path = "[0].substitution_policy.gpuCount"
    for bad in (3, {"min": 0}, {"max": True}, {"min": 1.5}):
        assert policy_problems({"gpuCount": bad}) == [f"{path}: min and max must be whole numbers ≥ 1"]
    assert policy_problems({"gpuCount": {"min": 4, "max": 2}}) == [f"{path}: min 4 is above max 2"]
    assert policy_problems({"gpuCount": {"min": 3}}) == [f"{path}: the spec's own gpuCount 2 is outside 3–None"]
    assert policy_problems({"gpuCount": {"max": 1}}) == [f"{path}: the spec's own gpuCount 2 is outside None–1"]
    assert policy_problems({"gpuCount": {"min": 1, "max": 4}}) == [] and policy_problems({"gpuCount": {}}) == []
    assert problems_of({**H100, "substitution_policy": {"gpuCount": {"min": 2}}}) == []  # no own count: nothing to hold


def test_disk_policies_are_minimums_in_whole_gigabytes():
    """Is a disk policy that is not {"min": <GB>} refused, for each of the two disks?"""
    assert policy_problems({"volumeGb": 3, "containerDiskGb": {"min": "a"}}) == [
        '[0].substitution_policy.volumeGb: must be {"min": <GB>}',
        '[0].substitution_policy.containerDiskGb: must be {"min": <GB>}']
    assert policy_problems({"volumeGb": {"min": 10}, "containerDiskGb": {}}) == []


def test_cloud_type_and_account_policies_allow_known_values_including_the_pods_own():
    """Are unknown values, a preference outside the list and a list without the pod's own value refused?"""
    shape = 'must be {"prefer": …, "allowed": […]}'
    assert policy_problems({"cloudType": "x"}) == [f"[0].substitution_policy.cloudType: {shape}"]
    assert policy_problems({"account": {"allowed": "team"}}) == [f"[0].substitution_policy.account: {shape}"]
    assert policy_problems({"cloudType": {"allowed": ["SECURE", "CHEAP"], "prefer": "COMMUNITY"}},
                           cloudType="COMMUNITY") == [
        '[0].substitution_policy.cloudType.allowed[1]: "CHEAP" is not one of SECURE, COMMUNITY',
        "[0].substitution_policy.cloudType.prefer: 'COMMUNITY' is not in allowed",
        "[0].substitution_policy.cloudType.allowed: does not include the spec's own cloudType 'COMMUNITY'"]
    assert policy_problems({"account": {"allowed": ["team", "gpu-farm"]}}, account="personal") == [
        '[0].substitution_policy.account.allowed[1]: "gpu-farm" is not one of team, personal, local',
        "[0].substitution_policy.account.allowed: does not include the spec's own account 'personal'"]
    assert policy_problems({"account": {"prefer": "team"}}, account="personal") == []
    assert policy_problems({"account": {"allowed": ["team", "personal"], "prefer": "team"}}, account="personal") == []
    assert policy_problems({"account": {"allowed": ["team"]}}) == []  # no account given: nothing to hold


def test_the_data_center_policy_is_any_or_a_list_of_ids():
    """Is a data-center policy other than "any" or a list of id strings refused?"""
    refused = ['[0].substitution_policy.dataCenterId.allowed: must be "any" or a list of data-center ids']
    assert policy_problems({"dataCenterId": "US"}) == refused
    assert policy_problems({"dataCenterId": {"allowed": ["US-KS-2", 3]}}) == refused
    assert policy_problems({"dataCenterId": {}}) == refused
    assert policy_problems({"dataCenterId": {"allowed": "any"}}) == []
    assert policy_problems({"dataCenterId": {"allowed": ["US-KS-2"]}}) == []


def test_policy_problems_come_in_field_order_after_the_pods_own():
    """With several bad policy fields, are problems listed pod fields first, then gpuType … dataCenterId?"""
    assert policy_problems({"dataCenterId": 1, "account": 1, "cloudType": 1, "containerDiskGb": 1, "volumeGb": 1,
                            "gpuCount": 1, "gpuType": 1}, gpuCount=0) == [
        "[0].gpuCount: must be at least 1, got 0",
        "[0].substitution_policy.gpuType.allowed: must be a non-empty list of GPU names",
        "[0].substitution_policy.gpuCount: min and max must be whole numbers ≥ 1",
        '[0].substitution_policy.volumeGb: must be {"min": <GB>}',
        '[0].substitution_policy.containerDiskGb: must be {"min": <GB>}',
        '[0].substitution_policy.cloudType: must be {"prefer": …, "allowed": […]}',
        '[0].substitution_policy.account: must be {"prefer": …, "allowed": […]}',
        '[0].substitution_policy.dataCenterId.allowed: must be "any" or a list of data-center ids']


def test_pod_problems_remembers_each_name_for_the_pods_after_it():
    """Does pod_problems add the pod's name to the names seen, so a later pod with it is a duplicate?"""
    names: set[str] = set()
    assert spec.pod_problems({**H100, "name": "sweep"}, "[0]", names) == [] and names == {"sweep"}
    assert spec.pod_problems({**H100, "name": "sweep"}, "[1]", names) == ["[1].name: duplicate pod name 'sweep'"]
    assert spec.pod_problems(H100, "[2]", names) == [] and names == {"sweep"}


def test_each_policy_rule_answers_for_its_own_path_and_owner():
    """Do the policy rules, called alone, name the path they are given and hold the owner's values?"""
    owner = spec.PolicyOwner({"gpuType": "A100", "gpuCount": 4, "cloudType": "SECURE"}, spec.find_gpu("A100"), "team")
    assert [key for key, _ in spec.POLICY_RULES] == ["gpuType", "gpuCount", "volumeGb", "containerDiskGb",
                                                     "cloudType", "account", "dataCenterId"]
    assert spec.gpu_type_policy_problems({"allowed": ["H100"]}, owner, "p") == [
        "p.allowed: does not include the spec's own GPU 'A100'"]
    assert spec.gpu_count_policy_problems({"max": 2}, owner, "p") == ["p: the spec's own gpuCount 4 is outside None–2"]
    assert spec.disk_policy_problems({"min": 1.5}, owner, "p") == ['p: must be {"min": <GB>}']
    assert spec.cloud_type_policy_problems({"allowed": ["COMMUNITY"]}, owner, "p") == [
        "p.allowed: does not include the spec's own cloudType 'SECURE'"]
    assert spec.account_policy_problems({"allowed": ["team"], "prefer": "local"}, owner, "p") == [
        "p.prefer: 'local' is not in allowed"]
    assert spec.data_center_policy_problems({"allowed": "anywhere"}, owner, "p") == [
        'p.allowed: must be "any" or a list of data-center ids']


def test_a_choice_policy_checks_values_preference_and_the_owners_value_in_that_order():
    """Does choice_policy_problems list unknown values first, then the preference, then the missing own value?"""
    assert spec.choice_policy_problems({"allowed": ["a", "z"], "prefer": "b"}, "p", "letter", ["a", "b"], "b") == [
        'p.allowed[1]: "z" is not one of a, b', "p.prefer: 'b' is not in allowed",
        "p.allowed: does not include the spec's own letter 'b'"]
    assert spec.choice_policy_problems({}, "p", "letter", ["a"], "a") == []  # no list: every choice allowed


def test_a_list_or_object_as_a_pod_name_is_a_problem_not_a_crash():
    """Is a name that is a list or an object reported like any bad name (it used to raise TypeError)?"""
    check = spec.validate([{**H100, "name": ["a"]}, {**H100, "name": {"a": 1}}, {**H100, "name": ["a"]}])
    assert check.problems == [f"[{i}].name: must be text of 1–120 characters" for i in range(3)]
