"""Clock-aware supervised fine-tuning on rendered timelines (TRL ``SFTTrainer`` with streaming masks)."""
