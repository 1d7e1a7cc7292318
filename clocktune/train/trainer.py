"""``ClockSFTTrainer``: TRL's ``SFTTrainer`` on rendered timelines with streaming attention.

What it changes in ``SFTTrainer``:

- data: the pre-tokenized rendered dataset is used as is (TRL's preparation skipped, per-token columns kept) and
  packed by :class:`~clocktune.collate.StreamingCollator`, which never splits a timeline;
- attention: the mask for the model's attention implementation is built on the batch's device at each step
  (a flex ``BlockMask`` on GPU, an additive float mask for sdpa/eager, nothing but restarted ``position_ids`` — or
  varlen boundaries for FlashAttention — when no token is ever hidden);
- loss: the LM head projects only positions that predict a label (``logits_to_keep``), through the model's own
  head, so PEFT's trainable rows for the new tokens train in the output layer too (TRL's fused head bypasses it);
- speed (``share_prompt``, ``cache_prompt``): the system prompt at the start of each row may run as a KV cache for
  the rest of the row, once for the whole batch when every row starts with the same one (``share_prompt``: the
  gradient is unchanged), and without gradients (``cache_prompt``);
- metrics: ``num_tokens`` counts real tokens (TRL's count sums the attention mask, which a 4D mask breaks), and
  loss and token accuracy are logged per action type (``loss/call``, ``accuracy/wait``, ...).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from transformers import DynamicCache
from trl import SFTTrainer

from clocktune.collate import METADATA_KEYS, StreamingCollator
from clocktune.masks import attention_inputs
from clocktune.render import IGNORE_INDEX
from clocktune.rendered_dataset import ACTION_TYPES
from clocktune.train.config import ClockSFTConfig


def cache_over(layers: list[tuple[torch.Tensor, torch.Tensor]], config: Any) -> DynamicCache:
    """A fresh cache over stored keys and values (a prompt's, per layer), for one forward to continue from.

    ``update`` concatenates onto an empty layer, so the tokens fed after them never touch the stored tensors: many
    forwards can continue from one prompt, and gradients through it sum as they would over separate copies.
    """
    cache = DynamicCache(config=config)
    for index, (keys, values) in enumerate(layers):
        cache.update(keys, values, index)
    return cache


class ClockSFTTrainer(SFTTrainer):
    """Supervised fine-tuning on rendered timelines with streaming masks.

    Args:
        model: A model or model id, as for ``SFTTrainer``.
        args: The training configuration.
        train_dataset: A rendered dataset (``clocktune.rendered_dataset.render_timelines`` or ``clocktune render``).
        eval_dataset: The same for evaluation.
        processing_class: The tokenizer extended with clock tokens (``clocktune.encoding.extend_tokenizer``).
        **kwargs: Passed to ``SFTTrainer`` (``peft_config``, ``callbacks``, ...).
    """

    def __init__(
        self, model: Any, args: ClockSFTConfig, train_dataset=None, eval_dataset=None, processing_class=None, **kwargs
    ):
        if not isinstance(args, ClockSFTConfig):
            raise TypeError(f"ClockSFTTrainer needs a ClockSFTConfig, got {type(args).__name__}")
        if processing_class is None:
            raise ValueError("ClockSFTTrainer needs the tokenizer extended with clock tokens as processing_class")
        if "data_collator" not in kwargs:
            # share_prompt wants every row to start with the prompt: one timeline a row, not packed.
            kwargs["data_collator"] = StreamingCollator(
                max_length=args.max_length,
                pad_token_id=processing_class.pad_token_id
                if processing_class.pad_token_id is not None
                else processing_class.eos_token_id,
                pack=not args.share_prompt,
                pad_to_multiple_of=args.pad_to_multiple_of or 1,
            )
        super().__init__(
            model=model,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            **kwargs,
        )
        # Loss weight per action code (ACTION_TYPES order), or None for the plain token mean.
        weights = args.action_loss_weights
        self._action_weights = torch.tensor([weights.get(name, 1.0) for name in ACTION_TYPES]) if weights else None
        # The prompt's cache of the current optimizer step (`_step_prompt_cache`): its key and its layers.
        self._prompt_layers: tuple[tuple, list[tuple[torch.Tensor, torch.Tensor]]] | None = None

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """Saves like the Trainer, except that a LoRA adapter holds only its own weights and the new token rows.

        Adding the clock tokens resizes the embedding, and PEFT then saves the whole embedding and head in the adapter
        (242 MiB at 135M parameters). Every new row is a trainable token (``trainable_token_indices``) whose trained
        values the adapter stores anyway, so the adapter needs nothing else: a loader resizes the base to the
        tokenizer (``AutoPeftModelForCausalLM`` does) and the adapter writes those rows.
        """
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        config = getattr(model, "peft_config", {}).get("default")
        if config is None or not getattr(config, "trainable_token_indices", None):
            super()._save(output_dir, state_dict)
            return
        save = model.save_pretrained
        # The Trainer calls save_pretrained with its own arguments; this instance attribute adds one to them.
        model.save_pretrained = functools.partial(save, save_embedding_layers=False)
        try:
            super()._save(output_dir, state_dict)
        finally:
            del model.save_pretrained

    def _attention_kwargs(self, meta: dict[str, torch.Tensor], dtype: torch.dtype, prefix: int) -> dict[str, Any]:
        """The attention inputs for this batch, built where the batch lives, for the queries after ``prefix``."""
        implementation = self.model.config._attn_implementation
        if self.args.mask_policy == "causal":
            # Ablation: treat every token as visible forever, which is plain block-causal packing.
            meta = {**meta, "visible_until": torch.full_like(meta["visible_until"], math.inf)}
        return attention_inputs(meta, implementation, self.args.attention_window_s, dtype, query_start=prefix)

    def _prompt_length(self, meta: dict[str, torch.Tensor], labels: torch.Tensor) -> int:
        """Tokens at the start of every row that are system prompt and that no label is predicted from (0 if off)."""
        if not (self.args.cache_prompt or self.args.share_prompt):
            return 0
        # Leading run of sink tokens in each row; the shortest one is shared by the whole batch.
        leading_sink = meta["sink"].int().cumprod(dim=-1).sum(dim=-1).min()
        # Logits at p predict the label at p + 1, so the prefix ends before the position that predicts the first
        # label (before the last position when there is none).
        labelled = (labels != IGNORE_INDEX).any(dim=0).nonzero()
        first_label = int(labelled[0]) if len(labelled) else labels.shape[-1]
        return max(min(int(leading_sink), first_label - 1), 0)

    def _run_prompt(self, model, inputs: dict[str, Any], prefix: int) -> dict[str, Any]:
        """Runs the first ``prefix`` tokens (once when every row holds the same ones and ``share_prompt`` is set,
        without gradients under ``cache_prompt``); returns the inputs for the rest, with their cache."""
        position_ids = inputs.pop("position_ids")
        input_ids = inputs.pop("input_ids")
        prompt_ids = input_ids[:, :prefix]
        rows = input_ids.shape[0]
        # Gradients from every row's copy of a shared prompt sum in the repeat, as they would over separate copies.
        shared = self.args.share_prompt and bool((prompt_ids == prompt_ids[:1]).all())
        if shared:
            prompt_ids = prompt_ids[:1]
        positions = position_ids[: len(prompt_ids), :prefix]
        if shared and self.args.cache_prompt:
            cache = self._step_prompt_cache(model, prompt_ids, positions)
        else:
            cache = DynamicCache(config=self.model.config)
            with torch.set_grad_enabled(torch.is_grad_enabled() and not self.args.cache_prompt):
                # One causal segment starting at position 0 in every row: no mask needed.
                model(input_ids=prompt_ids, position_ids=positions, cache=cache, use_cache=True)
        if shared and rows > 1:
            cache.batch_repeat_interleave(rows)
        if self.args.share_prompt:
            # A lone row shares its prompt only through the step's cache, with the micro-batches after it.
            served_more = shared and (rows > 1 or self.args.cache_prompt)
            self._metrics["train" if self.model.training else "eval"]["shared_prompt"].append(float(served_more))
        return {**inputs, "input_ids": input_ids[:, prefix:], "position_ids": position_ids[:, prefix:], "cache": cache}

    def _step_prompt_cache(self, model, prompt_ids: torch.Tensor, position_ids: torch.Tensor) -> DynamicCache:
        """A fresh cache holding one row's prompt, run without gradients at most once per optimizer step.

        The weights change only at optimizer steps, so a prompt run without gradients gives the same keys and values
        to every micro-batch of a step: gradient accumulation over one-timeline micro-batches (no padding between
        timelines of different lengths) then costs one prompt a step, as a batch of several rows does.
        """
        key = (self.state.global_step, self.model.training, tuple(prompt_ids[0].tolist()))
        if self._prompt_layers is None or self._prompt_layers[0] != key:
            cache = DynamicCache(config=self.model.config)
            with torch.no_grad():
                # One causal segment starting at position 0: no mask needed.
                model(input_ids=prompt_ids, position_ids=position_ids, cache=cache, use_cache=True)
            self._prompt_layers = (key, [(layer.keys, layer.values) for layer in cache.layers])
        return cache_over(self._prompt_layers[1], self.model.config)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        meta = {key: inputs.pop(key) for key in METADATA_KEYS if key in inputs}
        labels = inputs.pop("labels")
        dtype = torch.bfloat16 if self.args.bf16 else next(model.parameters()).dtype
        prefix = self._prompt_length(meta, labels)
        inputs.update(self._attention_kwargs(meta, dtype, prefix))
        if prefix:
            inputs = self._run_prompt(model, inputs, prefix)

        # Project only the positions that predict a label: agent tokens are a small share of a timeline, and the
        # model's own LM head (PEFT-wrapped when new token rows train) applies, unlike a fused head.
        targets_all = labels[:, 1:]
        positions = (targets_all != IGNORE_INDEX).any(dim=0).nonzero().squeeze(-1)
        outputs = model(**inputs, use_cache=bool(prefix), logits_to_keep=positions - prefix)
        kept = targets_all[:, positions]
        labelled = kept != IGNORE_INDEX
        # `positions` is the union over rows; each row predicts a label at only its own share of them (a quarter
        # at four timelines a row), so the vocabulary-wide softmax runs on the labelled (row, position) pairs alone.
        logits = outputs.logits[labelled].float()
        targets = kept[labelled]
        actions = meta["action"][:, 1:][:, positions].to(labelled.device)[labelled]
        # One log-softmax serves the loss and the entropy metric.
        log_probs = logits.log_softmax(dim=-1)
        nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        weighted = nll
        if self._action_weights is not None:
            weighted = nll * self._action_weights.to(nll.device, nll.dtype)[actions.long()]
        num_tokens = targets.numel() if num_items_in_batch is None else num_items_in_batch
        loss = weighted.sum() / torch.as_tensor(num_tokens, device=nll.device).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * (self.accelerator.num_processes // self.get_tp_size())

        with torch.no_grad():
            self._log_token_metrics(mode, log_probs, nll, targets, actions)
        if mode == "train":
            # Padding arrives at time inf; every other position is a token the model processed.
            real_tokens = torch.isfinite(meta["time"]).sum()
            self._total_train_tokens += self.accelerator.gather_for_metrics(real_tokens).sum().item()
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        return (loss, outputs) if return_outputs else loss

    def _log_token_metrics(self, mode, log_probs, nll, targets, actions) -> None:
        """Token accuracy and entropy as TRL logs them, plus loss and accuracy per action type (one entry per
        labelled token)."""
        gather = self.accelerator.gather_for_metrics
        valid = gather(torch.tensor(targets.numel(), device=targets.device)).sum()
        if valid == 0:
            return
        log_probs = log_probs.detach()
        is_top1 = log_probs.argmax(dim=-1) == targets
        entropy = -(log_probs.exp() * log_probs).sum(dim=-1)
        self._metrics[mode]["mean_token_accuracy"].append((gather(is_top1.sum()).sum() / valid).item())
        self._metrics[mode]["entropy"].append((gather(entropy.sum()).sum() / valid).item())
        nll = nll.detach()
        for code, name in enumerate(ACTION_TYPES):
            if name == "none":
                continue
            selected = actions == code
            count = gather(selected.sum()).sum()
            if count == 0:
                continue
            self._metrics[mode][f"loss/{name}"].append((gather(nll[selected].sum()).sum() / count).item())
            self._metrics[mode][f"accuracy/{name}"].append((gather(is_top1[selected].sum()).sum() / count).item())
