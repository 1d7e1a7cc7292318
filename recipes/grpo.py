"""Reinforcement learning recipe: GRPO with the runtime as the environment.

Usage:

    accelerate launch --config_file configs/accelerate/cpu.yaml recipes/grpo.py \
        --config configs/smollm2-135m/grpo_cpu.yaml

The code lives in clocktune.train.grpo; this top-level script hands it the generator's tool backends, which the
rollouts' sessions call, and its experts, who play `expert_generations` of each task's rollouts (the library below it
never imports data_gen). A domain file's Python backend named by the
data runs only with `--trust-domain-code` (see data_gen/declarative). With `push_to_hub` set, the policy saved merged
onto its start is uploaded after training, from the main process, as `clocktune push` would
(clocktune.cli.train_push); the Trainer itself pushes none of its adapters.
"""

from clocktune.cli.train_push import push_trained
from clocktune.train.grpo import run
from data_gen.backends import session_backends
from data_gen.expert import experts_of_data

if __name__ == "__main__":
    _, training_args = run(backends=session_backends, experts=experts_of_data)
    push_trained(training_args)
