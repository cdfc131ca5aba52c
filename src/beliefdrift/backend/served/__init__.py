"""Models behind an OpenAI-compatible inference server (vLLM, SGLang, llama.cpp): `--model openai:BASE_URL`.

The server computes, we sample. For a path whose context is the token ids x (prompt, then its answers so far), one
completion request of one token returns the server's log-probabilities ℓ at the next position, and θ and the label
mass are `AnswerDist.from_logprobs(ℓ[label ids])`, the formulas of `AnswerDist.from_logits`. Answers, seeds and
chain-of-thought tokens are drawn here, with the engine's generators (a rollout's token from the top
log-probabilities, as many as determine the nucleus sampler's draw: `backend.sampling.nucleus_logits`), so a served
run is stored, resumed and reproduced like a local one. A server gives no hidden states.

The modules by job:

- `spec`: `openai:BASE_URL` and `ServedError` (a `UserError`: one line, exit status 2);
- `options`: `--model-args` (`ServerOptions`) and the API dialects they choose (`DIALECTS`);
- `transport`: HTTP with retries, the one place every request goes through (`Transport`);
- `completions`, `chat`: one module per API dialect, each the body of a one-token request and the parsing of its
  response (`Reply`);
- `tokens`: the served model's tokenizer and how responses name its tokens (`TokenMap`, the vocabulary's texts
  built once);
- `endpoint`: one served model as the engine reaches it (`Endpoint`: probing what the server accepts, the options'
  log-probabilities, the next-token logits of rollouts);
- `paths`: answer paths and rollouts on a server (`ServedBatch`, `ServedRollouts`);
- `model`: the `LanguageModel` (`ServedModel`, `connect`) and the run identity's part (`served_identity`).
"""

from typing import TYPE_CHECKING

from beliefdrift.backend.served.tokens import load_tokenizer as _load_tokenizer  # noqa: F401 (tests/test_served.py's name)
from beliefdrift.exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (`beliefdrift.exports`)
    from beliefdrift.backend.sampling import nucleus_logits as nucleus_logits
    from beliefdrift.backend.served.model import ServedModel as ServedModel
    from beliefdrift.backend.served.model import connect as connect
    from beliefdrift.backend.served.model import served_identity as served_identity
    from beliefdrift.backend.served.model import served_model as served_model
    from beliefdrift.backend.served.options import ServerOptions as ServerOptions
    from beliefdrift.backend.served.spec import SERVED_PREFIX as SERVED_PREFIX
    from beliefdrift.backend.served.spec import SERVED_SETTINGS as SERVED_SETTINGS
    from beliefdrift.backend.served.spec import ServedError as ServedError
    from beliefdrift.backend.served.spec import is_served as is_served
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__, __all__ = lazy_exports(__name__)
