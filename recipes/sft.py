"""Clock-aware SFT recipe.

Usage:

    accelerate launch --config_file configs/accelerate/single_gpu.yaml recipes/sft.py \
        --config configs/qwen2.5-3b/sft_lora.yaml

Every YAML under configs/ starts with its own launch line. The code lives in clocktune.train.sft, so that
`clocktune train --config ...` runs exactly the same steps.
"""

from clocktune.train.sft import run

if __name__ == "__main__":
    run()
