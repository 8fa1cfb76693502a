"""The committed JSON Schema covers every installed component's params and is not stale."""

from __future__ import annotations

import json

from dare.spec import json_schema
from dare.testing import repo_root


def test_committed_schema_is_up_to_date():
    path = repo_root() / "schemas" / "run-spec.schema.json"
    want = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    assert path.is_file(), "schemas/run-spec.schema.json is missing: run `dare schema`"
    assert path.read_text() == want, "schemas/run-spec.schema.json is stale: run `dare schema` and commit it"


def test_schema_has_component_params():
    schema = json.dumps(json_schema())
    for needle in ('"mask_eps"', '"gen_length"', '"require_answer_tags"', '"const": "sft"', '"const": "llada"'):
        assert needle in schema, needle
