"""A test double that decodes with a model policy at every decision point while a scripted policy acts."""


class ModelProbe:
    """Feeds a ModelPolicy the session's events but acts like a scripted policy, and records what the model did at
    each decision point: the model's context is a live session's (arrivals at boundaries, revisions hidden) and goes
    through every path a real model run does, whatever it writes.

    Records ``logits`` (``(t, tokens kept in the cache, next-token logits at the prompt)``) and ``actions`` (the
    token ids of each action the model wrote).
    """

    io_bound = False

    def __init__(self, model_policy, scripted):
        self.inner, self.scripted, self.name = model_policy, scripted, "probe"
        self.logits = []
        self.actions = []

    def close(self):
        self.inner.close()

    def observe(self, events):
        self.scripted.observe(events)
        return self.inner.observe(events)

    def act(self, t):
        self.inner.act(t)  # runs the cache, the streaming mask and the decoding loop; its choice is ignored
        self.logits.append((t, len(self.inner.fed_ids), self.inner.last_prompt_logits))
        self.actions.append(list(self.inner.last_action_ids))
        return self.scripted.act(t)
