"""Multi-turn rollouts on CPU: a tool, a tool parser and an agent loop for verl's real
multi-turn path (``actor_rollout_ref.rollout.multi_turn``), loaded by verl's agent-loop
workers from the harness's YAML files (:data:`verlcpu.TOOLS_CONFIG`,
:data:`verlcpu.AGENT_LOOPS_CONFIG`; overrides: :func:`verlcpu.multi_turn_overrides`).

- :class:`CalcTool`: a calculator (``calc(a, b)`` returns ``a + b``), a verl ``BaseTool``;
- :class:`AlwaysCalcParser` (``multi_turn.format=verlcpu_calc``): whatever the model wrote,
  one ``calc`` call. A random tiny model never writes a tool call, so without it verl's
  ``tool_agent`` loop would stop after one assistant turn;
- :class:`TurnSplitAgentLoop` (``default_agent_loop=tool_agent_turns``): verl's
  ``ToolAgentLoop``, its trajectory returned as one output per assistant turn, verl's V1
  multi-output path (``verl/trainer/ppo/v1/agent_loop_tq.py:178-193``: each output a row
  of the batch, keyed ``{uid}_{session_id}_{index}``).

With ``VERLCPU_TURN_TOKENS`` (:mod:`verlcpu.server`) capping each generate call, several
turns fit in the response length. Imported by verl's agent-loop workers (verl is loaded
there before the YAML names this module).
"""

from __future__ import annotations

import json
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

PARSER_NAME = "verlcpu_calc"


class CalcTool(BaseTool):
    """``calc(a, b)``: the sum, as text (an error message for arguments that are not
    numbers); no reward of its own."""

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        try:
            text = f"{float(parameters['a']) + float(parameters['b']):g}"
        except (KeyError, TypeError, ValueError) as error:
            text = f"error: {type(error).__name__}: {error}"
        return ToolResponse(text=text), 0.0, {}


@ToolParser.register(PARSER_NAME)
class AlwaysCalcParser(ToolParser):
    """One ``calc(2, 3)`` call after every assistant turn, whatever its text."""

    async def extract_tool_calls(
        self, responses_ids: list[int], tools: Any = None
    ) -> tuple[str, list[FunctionCall]]:
        text = self.tokenizer.decode(responses_ids)
        return text, [FunctionCall(name="calc", arguments=json.dumps({"a": 2, "b": 3}))]


def assistant_turns(mask: list[int]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of 1s in a response mask: the assistant turns, the
    tool's tokens (0) between them.

    Examples:
        >>> assistant_turns([1, 1, 0, 0, 1, 0, 1, 1])
        [(0, 2), (4, 5), (6, 8)]
    """
    turns: list[tuple[int, int]] = []
    for i, value in enumerate(mask):
        if value and (i == 0 or not mask[i - 1]):
            turns.append((i, i + 1))
        elif value:
            turns[-1] = (turns[-1][0], i + 1)
    return turns


def split_by_turn(output: AgentLoopOutput) -> list[AgentLoopOutput]:
    """One output per assistant turn of ``output``: turn k's response is its own tokens
    (mask 1), its prompt the original prompt and everything before it (the earlier turns
    and the tool's answers); the tokens after the last turn, if any, stay in the last
    output (with their mask)."""
    mask = list(output.response_mask)
    turns = assistant_turns(mask)
    if len(turns) < 2:
        return [output]
    outputs = []
    for k, (start, end) in enumerate(turns):
        stop = len(mask) if k == len(turns) - 1 else end
        logprobs = output.response_logprobs
        outputs.append(
            output.model_copy(
                update={
                    "prompt_ids": list(output.prompt_ids) + list(output.response_ids[:start]),
                    "response_ids": list(output.response_ids[start:stop]),
                    "response_mask": mask[start:stop],
                    "response_logprobs": None if logprobs is None else list(logprobs[start:stop]),
                    "extra_fields": dict(output.extra_fields),
                },
                deep=True,
            )
        )
    return outputs


class TurnSplitAgentLoop(ToolAgentLoop):
    """verl's tool agent loop, one output per assistant turn (see :func:`split_by_turn`)."""

    async def run(
        self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any
    ) -> list[AgentLoopOutput]:
        output = await super().run(sampling_params, priority=priority, **kwargs)
        return split_by_turn(output)
