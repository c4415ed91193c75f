"""Stub: random_uuid for OpenRLHF's vllm_engine."""

import uuid


def random_uuid() -> str:
    return uuid.uuid4().hex
