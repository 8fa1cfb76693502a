"""The committed JSON Schema covers every first-party component's params and is not stale; a user's own
installed plugins (``dare new-plugin``) do not make it stale."""

from __future__ import annotations

import json

from dare.plugins.manager import first_party, get_registry
from dare.runspec import json_schema
from dare.testing import repo_root


def test_committed_schema_is_up_to_date():
    path = repo_root() / "schemas" / "run-spec.schema.json"
    want = json.dumps(json_schema(get_registry().restricted(first_party())), indent=2, sort_keys=True) + "\n"
    assert path.is_file(), "schemas/run-spec.schema.json is missing: run `make schema` (dare schema --first-party -o schemas/run-spec.schema.json)"
    assert path.read_text() == want, "schemas/run-spec.schema.json is stale: run `make schema` and commit it"


def test_restricted_registry_drops_other_distributions():
    reg = get_registry()
    only_core = reg.restricted(["dare-dllm"])
    assert "sudoku" in only_core.names("reward")  # rewards are built into the core
    assert all(e.distribution == "dare-dllm" for e in only_core.all())
    assert only_core.names("objective") == [] and only_core.names("model_family") == []


def test_schema_has_component_params():
    schema = json.dumps(json_schema())
    for needle in ('"mask_eps"', '"gen_length"', '"require_answer_tags"', '"const": "sft"', '"const": "llada"'):
        assert needle in schema, needle
