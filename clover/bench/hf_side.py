"""The transformers side of ``clover.bench.hf_export`` (the export tests and
``benchmarks/bench_hf_export.py``), run as a script in a fresh interpreter where ``clover`` cannot
be imported: ``python hf_side.py EXPORT_DIR JOB.pt RESULT.pt``.

The job (a ``torch.save`` dict) asks for any of: ``logits`` (a list of (input_ids, noisy_input_ids
or None, block_size or None, attention_mask or None)), ``generate`` (a list of {prompts, policy,
max_new_tokens, block_size}), ``chats`` (a list of (messages, tools) rendered by the exported
tokenizer's chat template), ``lora`` (a directory: one PEFT LoRA training step, then the merged
model saved there). The results go to RESULT.pt; importing clover must fail first.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from pathlib import Path


class NoClover(importlib.abc.MetaPathFinder):
    """Refuses ``clover`` and its submodules, whatever is installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "clover" or name.startswith("clover."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: an export must load without clover)")
        return None


def main(export: str, job_path: str, result_path: str) -> None:
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # this script's folder: clover/bench's modules would shadow packages (sglang, …)
    sys.meta_path.insert(0, NoClover())
    try:
        importlib.import_module("clover")  # by name: no import statement for the layering test to read
    except ModuleNotFoundError:
        pass
    else:
        raise SystemExit("clover is importable in the isolated interpreter")

    import torch  # after the blocker, as every import here
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    job = torch.load(job_path, weights_only=True)
    model = AutoModelForCausalLM.from_pretrained(export, trust_remote_code=True, dtype=torch.float32)
    res: dict = {"clover_blocked": "clover" not in sys.modules, "class": type(model).__name__}
    with torch.no_grad():
        res["logits"] = [
            model(x0, attention_mask=mask, noisy_input_ids=xt, block_size=bs).logits
            for x0, xt, bs, mask in job.get("logits", [])
        ]
    res["generate"] = []
    for g in job.get("generate", []):
        rows = []
        for p in g["prompts"]:
            ids = torch.tensor([p])
            out = model.generate(
                ids, max_new_tokens=g["max_new_tokens"], policy=g["policy"], block_size=g["block_size"]
            )
            rows.append(out[0, ids.shape[1] :].tolist())
        res["generate"].append(rows)
    if job.get("chats"):
        tok = AutoTokenizer.from_pretrained(export, trust_remote_code=True)
        res["chats"] = []
        for messages, tools in job["chats"]:
            out = tok.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=True)
            res["chats"].append(list(out["input_ids"] if hasattr(out, "keys") else out))
    if job.get("automodel") is not None:  # the backbone alone: its final hidden states
        from transformers import AutoModel

        base = AutoModel.from_pretrained(export, trust_remote_code=True, dtype=torch.float32)
        with torch.no_grad():
            res["hidden"] = (type(base).__name__, base(job["automodel"]).last_hidden_state)
    if job.get("lora"):
        res["lora"] = lora_step(model, job["lora"])
    torch.save(res, result_path)


def lora_step(model, out_dir: str) -> dict:
    """One LoRA training step on a masked-denoising loss; the merged model is saved in ``out_dir``."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    c = model.config
    x0 = torch.randint(0, c.mask_token_id, (2, 3 * c.block_size - 1))
    noisy = x0.masked_fill(torch.rand(x0.shape) < 0.5, c.mask_token_id)
    labels = x0.masked_fill(noisy != c.mask_token_id, -100)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    targets = ["q_proj", "v_proj", "in_proj_qkv", "out_proj"]
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets))
    lora = [p for n, p in peft.named_parameters() if p.requires_grad]
    before = [p.detach().clone() for p in lora]
    opt = torch.optim.AdamW(lora, lr=1e-2)
    loss0 = peft(input_ids=x0, noisy_input_ids=noisy, labels=labels).loss
    loss0.backward()
    opt.step()
    with torch.no_grad():
        loss1 = peft(input_ids=x0, noisy_input_ids=noisy, labels=labels).loss
    frozen = {k.replace("base_model.model.", "").replace(".base_layer", ""): v for k, v in peft.state_dict().items()}
    base_unchanged = all(torch.equal(base[k], v) for k, v in frozen.items() if k in base)  # before merging
    merged = peft.merge_and_unload()
    merged.save_pretrained(out_dir)
    with torch.no_grad():
        logits = merged(x0).logits
    return {
        "trainable": sum(p.numel() for p in lora),
        "loss": [float(loss0), float(loss1)],
        "lora_changed": any(not torch.equal(a, p) for a, p in zip(before, lora)),
        "base_unchanged": base_unchanged,
        "x0": x0,
        "merged_logits": logits,
    }


if __name__ == "__main__":
    main(*sys.argv[1:4])
