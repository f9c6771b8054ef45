"""A verifiers harness for agentgym's tests: verifiers' own null-harness chat program (the harness that relays the
model's replies as the agent's turns), run with this venv's Python instead of a uv-provisioned interpreter. The
program's dependencies (openai, mcp, httpx, ...) are verifiers' own, so nothing is downloaded: the eval stays on
127.0.0.1."""

from __future__ import annotations

import json
import sys

from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.harnesses.null import NullHarness, NullHarnessConfig
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

__all__ = ["VenvChatHarness", "VenvChatHarnessConfig"]

_PROGRAM = "agentgym-vf-chat.py"


class VenvChatHarnessConfig(NullHarnessConfig):
    pass


class VenvChatHarness(NullHarness):
    async def setup(self, runtime) -> None:
        await runtime.write(_PROGRAM, CHAT_PROGRAM_SOURCE.encode())

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        # launch_chat_program's arguments, with the program run by this interpreter
        system_prompt, prompt = self.resolve_prompt(data)
        args = [f"--base-url={endpoint}", f"--api-key={secret}", f"--model={ctx.model}"]
        if tool_interception_url:
            args.append(f"--tool-interception-url={tool_interception_url}")
        if system_prompt:
            args.append(f"--system-prompt={system_prompt}")
        if mcp_urls:
            args.append("--mcp-config=" + json.dumps({"mcpServers": {
                name: {"url": url, "timeout": self.config.tool_timeout} for name, url in mcp_urls.items()}}))
        if isinstance(prompt, str):
            args.append(f"--prompt={prompt}")
        elif prompt is not None:
            path = f".vf-initial-messages-{trace.id}.json"
            await runtime.write(path, json.dumps([message_to_wire(m) for m in prompt]).encode())
            args.append(f"--initial-messages-file={path}")
        return await runtime.run_program([sys.executable, _PROGRAM, *args], {**self.config.resolved_env})
