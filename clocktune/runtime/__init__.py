"""The real-time runtime: sessions that replay user speech, execute tools and ask a policy what to do, on a
virtual or the wall clock (docs/design.md §5).

- ``virtual_clock``: an asyncio loop whose time jumps to the next timer.
- ``executor``: the tool executor and its call graph (dependencies, commit, modify, cancel).
- ``session``: one dialogue's event loop, notices and retries, and its log.
- ``scripted``: policies that follow a recorded plan with a strategy's timing (sync ... oracle).
- ``model_policy``: a local Hugging Face model over the shared renderer with a KV cache.
- ``openai_policy``: an OpenAI-compatible chat endpoint with a prompted protocol.
- ``scoring`` and ``evaluate``: accuracy, latency and the benchmark report.
"""
