"""`beliefdrift reasoning`: drift of chain-of-thought trajectories in embedding space (paper Appendix E).

For each question, R rollouts write up to N thought–answer pairs <sol>…</sol><ans>…</ans>, with and
without m reasoning seeds (pairs drawn from a direct chain-of-thought prompt, prefilled first). Reports
cos(h̄_n, h̄_{n+τ}) of the pair-embedding centroids, mean ± std over questions, and the majority answer.
Each question × condition is stored in OUT/run.sqlite (finished questions are skipped on a re-run); also
OUT/records.csv, OUT/summary.json and OUT/centroid_drift.{png,pdf}. --template replaces the pairs prompt (a .txt
file with {num_lines} and {question}; default per dataset: reasoning-gsm8k, reasoning-gpqa, reasoning-mcqa).
"""

from __future__ import annotations

import argparse

from tqdm import tqdm

from beliefdrift.commands.common import add_data_args, add_model_args, add_output_args, model_from_args
from beliefdrift.data.registry import fingerprint, load_dataset
from beliefdrift.reasoning.embeddings import EMBEDDINGS
from beliefdrift.reasoning.experiment import ReasoningConfig, run_experiment, summary_markdown
from beliefdrift.reasoning.task import ReasoningTask, pairs_template
from beliefdrift.store import STORE_FILE

DEFAULTS = ReasoningConfig()


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reasoning",
        help="chain-of-thought drift: centroid cosine of thought–answer pair embeddings",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_args(parser)
    parser.set_defaults(template=None)
    add_data_args(parser, dataset="gsm8k", n=20)
    run = parser.add_argument_group("rollouts")
    run.add_argument("--seed", type=int, default=0, help="run seed (each question × condition derives its own)")
    run.add_argument("-R", "--rollouts", type=int, default=DEFAULTS.rollouts, help="rollouts per question (R)")
    run.add_argument("-N", "--pairs", type=int, default=DEFAULTS.pairs, help="pairs generated per rollout (N)")
    run.add_argument("-m", "--seeds", type=int, default=DEFAULTS.seeds,
                     help="reasoning seeds per rollout for the seeded condition (0: unseeded only)")
    run.add_argument("--tau", type=int, default=DEFAULTS.tau, help="lag τ of cos(h̄_n, h̄_{n+τ})")
    run.add_argument("--max-new-tokens", type=int, default=DEFAULTS.max_new_tokens, help="token budget per rollout")
    run.add_argument("--seed-max-new-tokens", type=int, default=DEFAULTS.seed_max_new_tokens,
                     help="token budget per reasoning seed")
    run.add_argument("--max-solution-tokens", type=int, default=DEFAULTS.max_solution_tokens,
                     help="guided format: close a solution after this many tokens")
    run.add_argument("--temperature", type=float, default=DEFAULTS.temperature)
    run.add_argument("--top-p", type=float, default=DEFAULTS.top_p)
    run.add_argument("--format", choices=["guided", "free"], default="guided" if DEFAULTS.guided else "free",
                     help="guided: the pair tags are written for the model; free: prompt only (the paper's)")
    run.add_argument("--embedding", choices=EMBEDDINGS, default=DEFAULTS.embedding,
                     help="hidden: mean last hidden state of the model; sentence: all-MiniLM-L6-v2 (extra)")
    add_output_args(parser, "beliefdrift-out/reasoning")
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    config = ReasoningConfig(
        rollouts=args.rollouts,
        pairs=args.pairs,
        seeds=args.seeds,
        tau=args.tau,
        max_new_tokens=args.max_new_tokens,
        seed_max_new_tokens=args.seed_max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        embedding=args.embedding,
        guided=args.format == "guided",
        max_solution_tokens=args.max_solution_tokens,
    )
    items = load_dataset(args.dataset, split=args.split, data_dir=args.data_dir, n=args.n, seed=args.seed)
    template = args.template or pairs_template(args.dataset)
    tasks = [ReasoningTask.from_item(item, template) for item in items]
    print(f"loading {args.model} ...", flush=True)
    lm = model_from_args(args)
    print(f"{len(tasks)} {args.dataset} questions, R={config.rollouts}, N={config.pairs}, m={config.seeds}, "
          f"τ={config.tau}, {args.format} format ({lm.dtype}, {lm.device})", flush=True)
    run_info = {"model": args.model, "dataset": args.dataset, "split": args.split, "template": template,
                "questions_sha256": fingerprint(items)}
    summary = run_experiment(
        lm, tasks, config, args.out, run_info, progress=lambda xs: tqdm(xs, desc="reasoning", unit="question")
    )
    print(summary_markdown(summary))
    print(f"wrote {args.out / STORE_FILE}, {args.out / 'summary.json'}, {', '.join(summary['figure'])}")
    return 0
