"""Training commands for the embedded model: `python -m engine.train {tokenizer,target,classifier,drafter}`."""
