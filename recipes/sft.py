"""Clock-aware SFT recipe.

Usage:

    accelerate launch --config_file configs/accelerate/single_gpu.yaml recipes/sft.py \
        --config configs/qwen2.5-3b/sft_lora.yaml

Every YAML under configs/ starts with its own launch line. The code lives in clocktune.train.sft, so that
`clocktune train --config ...` runs exactly the same steps. This top-level script is where the generator's tool
backends and experts are handed to training, for the live evaluation (`live_eval_steps`) and the on-policy rounds
(`on_policy_rounds`): the library below it never imports data_gen. A domain file's Python backend named by the
data runs only with `--trust-domain-code` (see data_gen/declarative). With `push_to_hub` set, the saved output is
uploaded after training, from the main process, as `clocktune push` would (clocktune.cli.train_push).
"""

from clocktune.cli.train_push import push_trained
from clocktune.train.sft import run
from data_gen.backends import check_domain_code, session_backends
from data_gen.expert import experts_of_data

if __name__ == "__main__":
    _, training_args = run(backends=session_backends, experts=experts_of_data, check_backends=check_domain_code)
    push_trained(training_args)
