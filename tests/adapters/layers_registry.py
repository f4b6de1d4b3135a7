"""Walk transformers' causal-LM registry with the ``layers`` adapter (issue 49).

For every ``model_type`` of ``MODEL_FOR_CAUSAL_LM_MAPPING`` this builds a tiny random-weight
checkpoint from the configuration class's defaults, shrunk (2 layers, 64 wide, the shipped
Huginn tokenizer's vocabulary), writes it with ``save_pretrained`` and then either

* the adapter refuses it: from ``config.json`` (:meth:`LayersAdapter.preflight`, before any
  weight loads) or at load (its anatomy, its final path, the self-check at every depth), in one
  line; or
* the adapter loads it, and its label readout (64 targets and the logsumexp) and its answer-text
  sums at every depth are compared, float32, with the reference this file computes on its own:
  the same checkpoint loaded by transformers with ``num_hidden_layers = t`` and eager attention,
  each ``[x, v_k]`` run alone on a freshly loaded model.

Architectures whose configuration class cannot be shrunk this way here (a dependency not
installed, a composite configuration) are listed as not built, with the reason.

``python tests/adapters/layers_registry.py [--write docs/reference/layers-architectures.md]``
prints (or writes) the table (and the README's generated clause); ``tests/adapters/test_layers_registry.py`` runs the same walk and
checks the page against it.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "layers-architectures.md"
PROMPT = "Question: Which gas do plants take in from the air?\nA. oxygen\nB. carbon dioxide\nAnswer:"
CONTINUATIONS = (" carbon dioxide", " oxygen and water vapour")
TOLERANCE = 1e-4  # nats, float32, every depth
N_LAYERS = 2
MAX_PARAMETERS = 12_000_000  # the token embeddings (65,536 x 64) and the head are 8.4M of a tiny model

#: the tiny shape, applied to whichever of these fields the configuration class takes
SHRINK = {
    "hidden_size": 64, "n_embd": 64, "d_model": 64, "intermediate_size": 128, "ffn_dim": 128, "n_inner": 128,
    "num_attention_heads": 4, "n_head": 4, "num_key_value_heads": 2, "head_dim": 16,
    "max_position_embeddings": 512, "n_positions": 512, "n_ctx": 512,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_k": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "state_size": 16, "d_state": 16, "mamba_d_state": 16, "ssm_state_size": 16, "mamba_n_heads": 8,
    "mamba_d_head": 16, "mamba_n_groups": 1, "n_groups": 1, "chunk_size": 16, "mamba_chunk_size": 16,
    "time_step_rank": 8, "rotary_dim": 8, "mamba_expand": 2, "expand": 2, "attn_layer_period": 2, "attn_layer_offset": 1,
    "initializer_range": 0.08,
}
#: configurations the registry's defaults do not reach, each a row of its own after the registry's:
#: name -> (model_type, the configuration's overrides). Falcon's two attention families (ALiBi;
#: the new decoder architecture with grouped key-value heads), LongRoPE with the items' lengths
#: past ``original_max_position_embeddings`` (the short and the long factors both in use), and a
#: sliding window shorter than the prompt (it binds). The prompt is 25 tokens, ``[x, v_1]`` 27 and
#: ``[x, v_2]`` 30 (the shipped Huginn tokenizer): with 28, only the second candidate takes the long
#: factors run alone, and a packed row would give them to every candidate.
VARIANTS: dict[str, tuple[str, dict]] = {
    "falcon (alibi)": ("falcon", {"alibi": True}),
    "falcon (new decoder)": ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),
    "phi3 (longrope)": ("phi3", {"original_max_position_embeddings": 28, "rope_scaling": {
        "type": "longrope", "short_factor": [1.0 + i / 8 for i in range(8)],
        "long_factor": [2.0 + i / 4 for i in range(8)]}}),
    "mistral (sliding window 8)": ("mistral", {"sliding_window": 8}),
}
BUDGET_S = 30  # one architecture's build, load and comparison; a slower one is listed as not built
LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


@dataclass
class Row:
    """One architecture's verdict."""

    model_type: str
    cls: str
    verdict: str  # "equal", "refused before loading", "refused at load", "differs", "not built"
    detail: str = ""
    layout: str = ""
    label_err: float | None = None
    text_err: float | None = None

    def cells(self) -> list[str]:
        """The page's cells (the measured errors are printed, not written: they move with the CPU)."""
        name = f"`{self.model_type}`" if " " not in self.model_type else "`{}` ({}".format(*self.model_type.split(" (", 1))
        return [name, self.verdict, self.layout, self.detail.replace("|", "\\|")]


def tiny_config(model_type: str, vocab: int, tokenizer, overrides: dict | None = None) -> object:
    """The configuration class's defaults with :data:`SHRINK` and ``N_LAYERS`` applied to the
    fields its ``__init__`` takes, then ``overrides`` (a :data:`VARIANTS` entry's)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    params = inspect.signature(cls.__init__).parameters
    takes = set(params) | set(getattr(cls, "attribute_map", {}))
    kw = {k: v for k, v in SHRINK.items() if k in takes}
    kw.update({f: N_LAYERS for f in LAYER_FIELDS if f in takes})
    if "vocab_size" in takes:
        kw["vocab_size"] = vocab
    for role in ("bos", "eos", "pad"):
        if f"{role}_token_id" in takes:
            kw[f"{role}_token_id"] = getattr(tokenizer, f"{role}_token_id", None) or 0
    if "layer_types" in params:
        kw["layer_types"] = None
    kw.update(overrides or {})
    return cls(**kw)


def build(model_type: str, out: Path, tokenizer_dir: Path, overrides: dict | None = None) -> Path:
    """A tiny random-weight checkpoint of ``model_type`` in ``out`` (``save_pretrained``, the
    tokenizer's files beside it); norms moved off the identity
    (:func:`depthtraj_adapters.tiny.layers.random_causal_lm`), so a readout normalising twice differs."""
    import torch
    from depthtraj_adapters.tiny.layers import random_causal_lm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = tiny_config(model_type, len(tokenizer), tokenizer, overrides)
    with torch.device("meta"):  # the size first: a configuration this walk cannot shrink stays large
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    if n > MAX_PARAMETERS:
        raise ValueError(f"shrunk to {n / 1e6:.0f}M parameters only (sub-configurations this walk does not shrink)")
    random_causal_lm(config, seed=0).save_pretrained(out)
    for f in tokenizer_dir.iterdir():
        if f.is_file():
            shutil.copyfile(f, out / f.name)
    return out


def truncated(ckpt: Path, t: int):
    """The checkpoint loaded by transformers with its first ``t`` decoder layers, eager
    attention, float32 weights rounded to bfloat16 (the reference; not the adapter's code)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(ckpt)
    for f in LAYER_FIELDS:
        if isinstance(getattr(config, f, None), int) and not isinstance(getattr(config, f), bool):
            setattr(config, f, t)
            break
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:t]
    model = AutoModelForCausalLM.from_pretrained(ckpt, config=config, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    with torch.no_grad():  # the weights rounded to bfloat16, as the adapter's arms round them
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return model


def reference(ckpt: Path, prompt: list[int], conts: list[list[int]], targets: list[int]):
    """Per depth t: the label log-probabilities of ``targets`` and the logsumexp at the prompt's
    last token, and each continuation's summed log-likelihood, ``[x, v_k]`` alone, on the
    truncated model."""
    import torch

    out = []
    with torch.inference_mode():
        for t in range(1, N_LAYERS + 1):
            model = truncated(ckpt, t)
            logits = model(torch.tensor([prompt])).logits[0, -1].double()
            label = torch.log_softmax(logits, -1)[targets].numpy()
            lse = float(torch.logsumexp(logits, -1))
            sums = []
            for cont in conts:
                lp = torch.log_softmax(model(torch.tensor([prompt + cont])).logits[0].double(), -1)
                sums.append(sum(float(lp[len(prompt) - 1 + j, c]) for j, c in enumerate(cont)))
            out.append((label, lse, sums))
    return out


def check(model_type: str, work: Path, tokenizer_dir: Path, name: str | None = None) -> Row:
    """Build, refuse or compare one architecture, or the :data:`VARIANTS` entry ``name`` of it
    (see the module docstring)."""
    import numpy as np
    from depthtraj.adapter import AdapterInputError, AdapterSelfCheckError, encode_pair
    from depthtraj.models.v1 import PrecisionArm
    from depthtraj_adapters.layers import LayersAdapter
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    overrides = VARIANTS[name][1] if name else None
    cls = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    row = name or model_type
    ckpt = work / model_type
    try:  # config.json alone first: what the adapter refuses before any weight exists
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        tiny_config(model_type, len(tokenizer), tokenizer, overrides).save_pretrained(ckpt)
    except Exception as exc:  # noqa: BLE001 - a configuration this walk cannot make here
        return Row(row, cls, "not built", _line(exc))
    try:
        LayersAdapter.preflight(ckpt, depths=N_LAYERS, options={})
    except AdapterInputError as exc:
        return Row(row, cls, "refused before loading", _line(exc))
    try:
        build(model_type, ckpt, tokenizer_dir, overrides)
    except Exception as exc:  # noqa: BLE001 - an architecture this walk cannot build here
        return Row(row, cls, "not built", _line(exc))
    fp32 = PrecisionArm(name="fp32", recurrence_dtype="float32", head_dtype="float32")
    try:
        adapter = LayersAdapter.load(ckpt, arms=[fp32], self_check=N_LAYERS)
    except (AdapterInputError, AdapterSelfCheckError) as exc:
        return Row(row, cls, "refused at load", _line(exc))
    except Exception:
        try:  # transformers' own loader on its own checkpoint
            from transformers import AutoModelForCausalLM

            AutoModelForCausalLM.from_pretrained(ckpt, **LayersAdapter.from_pretrained_kwargs, dtype="float32")
        except Exception as own:  # noqa: BLE001
            return Row(row, cls, "not built", f"transformers cannot load its own tiny checkpoint ({_line(own)})")
        raise
    prompt = adapter.tokenizer(PROMPT)["input_ids"]
    conts = [encode_pair(adapter.tokenizer, PROMPT, c)[1] for c in CONTINUATIONS]
    targets = list(range(0, 64 * 997, 997))
    label = adapter.label_readout([prompt], [targets], [0], N_LAYERS, fp32)
    text = adapter.text_readout([prompt], [conts], [0], N_LAYERS, fp32)
    layout = {"packed": "packed", "rows": "each candidate a row", "alone": "each sequence alone"}[adapter.sequence_layout]
    try:
        references = reference(ckpt, prompt, conts, targets)
    except Exception as exc:  # noqa: BLE001 - transformers cannot build the truncated model here
        return Row(row, cls, "not verified", f"the truncated reference cannot be built ({_line(exc)})", layout)
    worst_label = worst_text = 0.0
    for t, (ref_label, ref_lse, ref_sums) in enumerate(references):
        worst_label = max(worst_label, float(np.abs(label.logprob[0, t] - ref_label).max()),
                          abs(float(label.logsumexp[0, t]) - ref_lse))
        worst_text = max(worst_text, float(np.abs(text.logprob_sum[0, t, : len(conts)] - ref_sums).max()))
    verdict = "equal" if max(worst_label, worst_text) <= TOLERANCE else "differs"
    return Row(row, cls, verdict, "" if adapter.sequence_layout == "packed" else adapter.layout_reason,
               layout, worst_label, worst_text)


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 240 else text[:237] + "..."


class _OverBudget(Exception):
    pass


@contextlib.contextmanager
def _budget():
    """Raise :class:`_OverBudget` in the main thread after :data:`BUDGET_S` seconds."""
    import signal

    def alarm(signum, frame):
        raise _OverBudget

    before = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(BUDGET_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def walk(model_types: list[str] | None = None, log=None) -> list[Row]:
    """Every architecture of the registry (or ``model_types``), in name order."""
    import torch
    from depthtraj_adapters.tiny import HUGINN_TOKENIZER
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    rows = []
    names = model_types or [*sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), *VARIANTS]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            mt, variant = (VARIANTS[name][0], name) if name in VARIANTS else (name, None)
            cls = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[mt]
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), _budget():
                try:
                    rows.append(check(mt, Path(tmp), Path(HUGINN_TOKENIZER), variant))
                except _OverBudget:
                    rows.append(Row(name, cls, "not built", f"over this walk's {BUDGET_S} s on its tiny shape"))
                except Exception as exc:  # noqa: BLE001 - an adapter error: the test fails on it
                    rows.append(Row(name, cls, "error", _line(exc)))
            if log is not None:
                log(f"{name}: {rows[-1].verdict} ({time.perf_counter() - start:.1f} s)")
            shutil.rmtree(Path(tmp) / mt, ignore_errors=True)
    return rows


def table(rows: list[Row]) -> str:
    """The Markdown page of the walk's verdicts."""
    import transformers

    counts = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda x: -x[1]))
    head = ["model_type", "verdict", "answer text", "reason"]
    lines = [
        "# The layers adapter across transformers' causal-LM registry",
        "",
        "Generated by `python tests/adapters/layers_registry.py --write docs/reference/layers-architectures.md`",
        f"(transformers {transformers.__version__}); `tests/adapters/test_layers_registry.py` runs the same walk",
        "and fails when this page differs from it. Do not edit by hand.",
        "",
        f"Every `model_type` of `MODEL_FOR_CAUSAL_LM_MAPPING`: a tiny random-weight checkpoint ({N_LAYERS} layers,",
        "64 wide) built from the configuration class's defaults and `save_pretrained`. **equal**: the adapter",
        "loaded it, and its label readout and answer-text sums equal, at every depth, the same checkpoint",
        f"loaded with `num_hidden_layers = t` and eager attention, each `[x, v_k]` alone (within {TOLERANCE:g} nats,",
        "float32). **refused**: one line, before the weights load where `config.json` decides it. **not built**:",
        "this walk could not build a tiny model of it here (the reason is transformers', not the adapter's);",
        "**not verified**: the adapter loaded it, but transformers could not build the truncated reference.",
        "The last rows are configurations the defaults do not reach: Falcon with ALiBi and with its new decoder",
        "architecture, Phi-3 with LongRoPE past `original_max_position_embeddings`, Mistral with a sliding",
        "window shorter than the prompt.",
        "",
        f"Summary: {summary}.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
    ]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines) + "\n"


README = ROOT / "README.md"
MARK = ("<!-- layers-registry -->", "<!-- /layers-registry -->")


def readme_clause(rows: list[Row]) -> str:
    """The README's generated clause: how many of the registry's architectures the walk found
    equal at every depth, and where the table is."""
    registry = [r for r in rows if r.model_type not in VARIANTS]
    variants = [r for r in rows if r.model_type in VARIANTS]
    equal = sum(r.verdict == "equal" for r in registry)
    also = sum(r.verdict == "equal" for r in variants)
    return (f"{equal} of the {len(registry)} architectures of transformers' causal-LM registry, and {also} of "
            f"{len(variants)} configurations their defaults do not reach (ALiBi, LongRoPE, ...), equal the "
            f"truncated model at every layer: [the table](docs/reference/layers-architectures.md)")


def with_readme_clause(text: str, rows: list[Row]) -> str:
    """``text`` (the README) with its generated clause replaced."""
    head, rest = text.split(MARK[0], 1)
    _, tail = rest.split(MARK[1], 1)
    return head + MARK[0] + readme_clause(rows) + MARK[1] + tail


def main(argv: list[str]) -> int:
    write = "--write" in argv
    only = [a for a in argv if not a.startswith("--") and not a.endswith(".md")]
    rows = walk(only or None, log=lambda line: print(line, file=sys.stderr, flush=True))
    text = table(rows)
    for r in rows:
        if r.label_err is not None:
            print(f"{r.model_type}: {r.verdict}, largest |error| label {r.label_err:.2g}, text {r.text_err:.2g} nats",
                  file=sys.stderr)
    if write:
        target = Path(argv[argv.index("--write") + 1]) if len(argv) > argv.index("--write") + 1 else PAGE
        target.write_text(text)
        if not only:
            README.write_text(with_readme_clause(README.read_text(), rows))
        print(f"wrote {target}" + ("" if only else f" and {README.name}'s clause"))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
