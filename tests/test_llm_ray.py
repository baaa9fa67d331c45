"""The client is built and used inside an async Ray actor; its ledger comes back as JSON."""

from __future__ import annotations

from rg.llm.usage import UsageLedger
from tests.scripted_server import Reply, Script, ScriptedServer


def test_client_inside_async_actor(ray_local):
    ray = ray_local

    @ray.remote(num_cpus=0)
    class Caller:
        async def run(self, base_url: str, n: int) -> dict:
            import asyncio

            from rg.llm.client import OpenAICompatibleClient
            from rg.llm.config import LLMConfig

            client = OpenAICompatibleClient(LLMConfig(base_url=base_url, model="m", max_concurrency=2))
            messages = [{"role": "user", "content": "one two three"}]
            async with client:
                await asyncio.gather(*(client.complete(messages, stage="refine", prompt_id="t@v1") for _ in range(n)))
            return client.ledger.to_dict()

    with ScriptedServer(Script.always(Reply("ans: Path 1", delay_s=0.05))) as srv:
        shipped = ray.get([Caller.remote().run.remote(srv.base_url, 3) for _ in range(2)])
        assert len(srv.chat_requests) == 6
        assert srv.max_in_flight <= 4  # two actors, two slots each
    ledger = UsageLedger()
    for part in shipped:
        ledger.merge(UsageLedger.from_dict(part))
    usage = ledger.get("refine", "hand")
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (6, 18, 18)
