"""Per-cell table of the collapse pilot: python research/collapse_pilot/summarize.py <results.csv> ..."""
import sys

import pandas as pd

GRID = ["learning_rate", "sampler_logit_noise", "sampler_staleness", "sampler_temperature", "min_p",
        "sampler_quantization", "correction"]


def table(paths):
    frames = []
    for p in paths:
        d = pd.read_csv(p)
        d["source_file"] = p
        frames.append(d)
    d = pd.concat(frames, ignore_index=True)
    d["cell"] = d["name"].str.replace(r",?seed=\d+", "", regex=True)
    d["cell"] = [f"{f.split('/')[-3]}/{f.split('/')[-2]}: {c}" for c, f in zip(d["cell"], d["source_file"])]
    g = d.groupby("cell", sort=False)
    out = pd.DataFrame({
        "seeds": g["seed"].count(),
        "collapsed": g["collapsed"].apply(lambda s: f"{int(s.astype(bool).sum())}/{len(s)}"),
        "reward_first": g["reward_first"].mean(),
        "reward_last": g["reward_last"].mean(),
        "reward_last_min": g["reward_last"].min(),
        "eval_reward": g["eval_reward"].mean(),
        "k3_kl_mean": g["k3_kl_mean"].mean(),
        "grad_blowups": g["grad_blowup"].apply(lambda s: f"{int(s.astype(bool).sum())}/{len(s)}"),
        "collapse_steps": g["collapse_step"].apply(lambda s: " ".join("-" if pd.isna(x) else str(int(x)) for x in s)),
        "collapse_dips": g["collapse_dips"].sum(),
        "train_s": g["train_s"].mean(),
    })
    return d, out


if __name__ == "__main__":
    d, out = table([a for a in sys.argv[1:] if not a.startswith("--")])
    pd.set_option("display.width", 250)
    print(out.to_markdown(floatfmt=".3g") if "--md" in sys.argv else out.to_string(float_format="{:.3g}".format))
