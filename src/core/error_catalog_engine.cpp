// The catalog entries of the engine, the KV pool and the models' layout rules (error_catalog.h).
#include "core/error_catalog_internal.h"

namespace ctxpar::core_internal {

namespace {
constexpr StatusCode kConfig = StatusCode::kInvalidArgument;
constexpr StatusCode kRuntime = StatusCode::kFailedPrecondition;
constexpr StatusCode kBusy = StatusCode::kUnavailable;
}  // namespace

std::vector<CatalogEntry> EngineCatalogEntries() {
  return {
      {"CTXPAR-ENGINE-001",
       "A run on a platform that is not this machine's CPU",
       "--platform {platform} names a machine that ctxpar's engine does not compute on: it runs "
       "the model on the CPU. Leave --platform (and CTXPAR_PLATFORM) unset or set it to cpu to "
       "run here; keep it to check a launch line for that machine with `ctxpar check` and no "
       "--model-path.",
       kConfig,
       "--platform and CTXPAR_PLATFORM describe the machine a launch line is meant for, so that "
       "`ctxpar check` can apply that machine's rules. `generate` and `serve` (and `check` with "
       "--model-path, which runs their checks) compute on this machine's CPU, so a named CUDA or "
       "ROCm platform would be silently ignored: it is refused instead.",
       "`ctxpar generate`, `ctxpar serve` or `ctxpar check --model-path M` with --platform "
       "cuda:... or rocm (or CTXPAR_PLATFORM set so).",
       {"Drop --platform (or set it to cpu) to run on this machine.",
        "To check a launch line for a GPU cluster, run `ctxpar check` with --platform and without "
        "--model-path."},
       "ctxpar generate --platform cuda:sm90 --tp-size 3 --dcp-size 3 'Hello'",
       "ctxpar generate --tp-size 3 --dcp-size 3 'Hello'",
       {"CTXPAR-DCP-003", "CTXPAR-FLAG-006"}},
      {"CTXPAR-ENGINE-002",
       "Data parallelism in a run",
       "--dp-size {dp_size}: ctxpar's engine runs one data-parallel replica (dp_size 1); start "
       "one ctxpar per replica instead.",
       kConfig,
       "SGLang's --dp-size runs several copies of the model behind one router. ctxpar's engine "
       "runs one copy over the tensor-parallel ranks of its MPI job; it has no router.",
       "`generate`, `serve` or `check --model-path` with --dp-size above 1.",
       {"Drop --dp-size.", "Run one `ctxpar serve` per replica on its own port."},
       "ctxpar serve --dp-size 2 --tp-size 3",
       "ctxpar serve --tp-size 3",
       {"CTXPAR-LAYOUT-002"}},
      {"CTXPAR-ENGINE-004",
       "A chunked prefill of zero tokens",
       "--chunked-prefill-size must be -1 (prefill whole prompts) or a positive number of tokens, "
       "but got 0.",
       kConfig,
       "The scheduler prefills at most --chunked-prefill-size prompt tokens per step; 0 would "
       "never prefill anything.",
       "--chunked-prefill-size 0 on check, generate or serve (-1 is the way to turn chunking off).",
       {"Use a positive size (the default 2048 suits the CPU), or -1 to prefill whole prompts."},
       "ctxpar serve --chunked-prefill-size 0",
       "ctxpar serve --chunked-prefill-size 2048",
       {"CTXPAR-ENGINE-007"}},
      {"CTXPAR-ENGINE-005",
       "A request longer than the model's context",
       "The request needs {needed} tokens ({prompt} prompt + {max_new} new), more than the "
       "model's context of {context} tokens.",
       kConfig,
       "A request's prompt and the tokens it may generate must fit the positions the model "
       "attends over. The engine refuses it up front rather than cutting it short.",
       "A prompt plus max_tokens / --max-new-tokens beyond the model's context length "
       "(SmolLM2-135M: 8192).",
       {"Shorten the prompt or lower max_tokens / --max-new-tokens."},
       "ctxpar generate --max-new-tokens 9000 'Hello'",
       "ctxpar generate --max-new-tokens 512 'Hello'",
       {"CTXPAR-ENGINE-006"}},
      {"CTXPAR-ENGINE-006",
       "A request larger than the whole KV pool",
       "The request needs {needed} tokens ({prompt} prompt + {max_new} new), more than the KV "
       "pool holds ({capacity} tokens: max_total_num_tokens).",
       kConfig,
       "Requests wait for KV pages, but one that needs more pages than the pool has could never "
       "run, so it is refused at once.",
       "A long prompt or a large max_tokens with a small --kv-cache-mib or --max-total-tokens.",
       {"Raise --kv-cache-mib (per rank) or --max-total-tokens.",
        "Use DCP (--dcp-size) to shard the KV over more ranks: the pool then holds dcp_size times "
        "more tokens.",
        "Shorten the prompt or lower max_tokens."},
       "ctxpar generate --kv-cache-mib 8 --max-new-tokens 4000 'Hello'",
       "ctxpar generate --kv-cache-mib 256 --max-new-tokens 4000 'Hello'",
       {"CTXPAR-ENGINE-005", "CTXPAR-KV-002"}},
      {"CTXPAR-ENGINE-007",
       "The request queue is full",
       "The request queue is full ({queued} requests wait, --max-queued-requests {limit}); try "
       "again later.",
       kBusy,
       "With --max-queued-requests the engine refuses new requests while that many wait for "
       "admission, so that clients get an answer at once instead of waiting without bound. The "
       "server answers 503.",
       "More requests arrive than the engine admits, and the queue limit is reached.",
       {"Retry after a while (HTTP 503 is retryable).",
        "Raise --max-queued-requests, or --max-running-requests and --kv-cache-mib so that more "
        "run at once."},
       "ctxpar serve --max-running-requests 1 --max-queued-requests 1  # then three requests "
       "at once",
       "ctxpar serve --max-running-requests 1 --max-queued-requests 64",
       {"CTXPAR-ENGINE-008"}},
      {"CTXPAR-ENGINE-008",
       "A request after the engine stopped",
       "The engine has stopped and takes no new request.",
       kBusy,
       "The engine was stopped (SIGINT / SIGTERM, or a fault) and ends its requests; it accepts "
       "nothing new.",
       "A request sent to a server that is shutting down.",
       {"Start the server again, or send the request to another one."},
       "ctxpar serve  # then SIGTERM while a client still sends requests",
       "ctxpar serve  # clients stop sending before the server is stopped",
       {"CTXPAR-ENGINE-007"}},
      {"CTXPAR-ENGINE-009",
       "Stop strings for a model without a tokenizer",
       "stop strings need the model's tokenizer, and {model} has none: give stop_token_ids "
       "instead.",
       kConfig,
       "A stop string is found in the generated text, which needs detokenization. A checkpoint "
       "without a tokenizer (such as a test model) takes and returns token ids only.",
       "A request with `stop` to a model served without a tokenizer.",
       {"Use stop_token_ids.", "Or serve a model with a tokenizer."},
       "ctxpar generate --model-path ./deepseek_v3_tiny --input-ids 5,6,7 --stop end",
       "ctxpar generate --model-path ./deepseek_v3_tiny --input-ids 5,6,7 --stop-token-ids 1",
       {"CTXPAR-SAMPLING-002"}},
      {"CTXPAR-ENGINE-010",
       "A prompt token outside the vocabulary",
       "prompt token {index} is {token}, outside the vocabulary [0, {vocab}).",
       kConfig,
       "Token ids index the model's embedding table; an id outside it has no meaning.",
       "--input-ids or a request's token ids with a value below 0 or at least the vocabulary "
       "size.",
       {"Use ids from the model's tokenizer (POST /tokenize)."},
       "ctxpar generate --input-ids 1,2,99999999",
       "ctxpar generate --input-ids 1,2,3",
       {"CTXPAR-SAMPLING-002"}},
      {"CTXPAR-FLAG-010",
       "A number flag got text that is not a number",
       "Invalid value {value} for {flag}: not a number; valid values: {valid}.",
       kConfig,
       "Some flags take a real number (SGLang's --schedule-conservativeness, for one). The text "
       "must read as one, as Python's float() reads it; inf and nan are out of every range.",
       "A float flag with text such as '1,5', 'half' or an empty value.",
       {"Write the number with a dot: 0.5, 1, 2.5e-1."},
       "ctxpar serve --schedule-conservativeness 1,5",
       "ctxpar serve --schedule-conservativeness 1.5",
       {"CTXPAR-FLAG-002", "CTXPAR-FLAG-003"}},
      {"CTXPAR-ENGINE-011",
       "A prompt without tokens",
       "prompt {index} encodes to no token: give it some text (or --input-ids).",
       kConfig,
       "A request starts from at least one token: its logits come from the last prompt token. An "
       "empty line of a prompts file, or an empty prompt with a tokenizer that adds no BOS, "
       "gives none.",
       "`ctxpar generate ''`, or a --prompts-file with an empty line.",
       {"Remove the empty line, or give the prompt some text."},
       "ctxpar generate ''",
       "ctxpar generate 'Hello'",
       {"CTXPAR-ENGINE-010"}},
      {"CTXPAR-ENGINE-012",
       "A prompts file that cannot be read",
       "--prompts-file {file} cannot be read: {reason}.",
       kConfig,
       "`ctxpar generate --prompts-file FILE` reads one prompt per line of FILE (UTF-8; a "
       "Windows line end or a byte order mark is dropped) before any rank starts.",
       "A path that does not exist or is a directory, a file the user may not read, or an empty "
       "file.",
       {"Check the path; every rank reads the file, so under a multi-node MPI job it must exist "
        "on every node.",
        "Give the file at least one prompt line."},
       "ctxpar generate --prompts-file /nonexistent",
       "ctxpar generate --prompts-file prompts.txt",
       {"CTXPAR-ENGINE-011"}},
      {"CTXPAR-ENGINE-013",
       "A text prompt for a model without a tokenizer",
       "{model} has no tokenizer, so a text prompt cannot be encoded: give the prompt as token "
       "ids (--input-ids 1,2,3).",
       kConfig,
       "A checkpoint without tokenizer files (such as a test model) takes and returns token ids "
       "only; text, --chat and --prompts-file need the model's tokenizer.",
       "`ctxpar generate` with a text prompt, --chat or --prompts-file on such a model.",
       {"Give the prompt as --input-ids and read the output with --print-ids.",
        "Or add the model's tokenizer files to the checkpoint."},
       "ctxpar generate --model-path ./deepseek_v3_tiny 'Hello'",
       "ctxpar generate --model-path ./deepseek_v3_tiny --input-ids 5,6,7 --print-ids",
       {"CTXPAR-ENGINE-009"}},
      {"CTXPAR-ENGINE-014",
       "An engine step ran past the watchdog",
       "An engine step has run {seconds} s, past --watchdog-timeout {limit} s: {running}; the "
       "server stops.",
       StatusCode::kUnavailable,
       "SGLang's watchdog: one step of the engine (a prefill chunk, a decode of the running "
       "requests) takes milliseconds to seconds, so a step that runs past --watchdog-timeout is "
       "stuck, usually waiting in a collective for a rank that does not answer. While it is, "
       "GET /health answers 503 with this error; then the server ends every open request (a "
       "stream with a final event carrying this error and [DONE], any other with 503) and exits, "
       "so that a supervisor restarts it rather than leave clients waiting forever.",
       "A rank stopped (kill -STOP, a debugger), swapping or starved of CPU; a watchdog shorter "
       "than the slowest legitimate step (a long prefill chunk on a slow machine).",
       {"Look at the ranks' processes: a stopped one shows state T in ps.",
        "If the step is legitimately slow, raise --watchdog-timeout or lower "
        "--chunked-prefill-size."},
       "ctxpar serve --tp-size 3 --dcp-size 3 --watchdog-timeout 2  # rank 1 stopped with kill "
       "-STOP",
       "ctxpar serve --tp-size 3 --dcp-size 3  # every rank running; the default watchdog, 300 s",
       {"CTXPAR-RUN-003", "CTXPAR-COMM-001"}},
      {"CTXPAR-ENGINE-015",
       "A prefix cache flush while requests run",
       "Cache not flushed because there are pending requests. #queue-req: {queued}, "
       "#running-req: {running}",
       kRuntime,
       "POST /flush_cache empties the prefix cache (the radix tree and the KV pages it owns). "
       "Running requests hold pages of the cache, so, as SGLang does, the flush is refused "
       "(HTTP 400) unless no request runs or waits.",
       "POST /flush_cache while requests are being served.",
       {"Retry once the requests have finished (GET /metrics: sglang:num_running_reqs and "
        "sglang:num_queue_reqs at 0)."},
       "ctxpar serve & curl localhost:30000/generate -d '{\"text\": \"Hi\"}' & curl -X POST "
       "localhost:30000/flush_cache",
       "ctxpar serve & curl localhost:30000/generate -d '{\"text\": \"Hi\"}'; curl -X POST "
       "localhost:30000/flush_cache",
       {"CTXPAR-HTTP-010"}},
      {"CTXPAR-ENGINE-016",
       "A prompt longer than the engine accepts",
       "Input length ({prompt} tokens) exceeds the maximum allowed length ({max} tokens). Use a "
       "shorter input or enable --allow-auto-truncate.",
       kConfig,
       "SGLang's limit on a prompt: max_req_input_len = min(context length, "
       "max_total_num_tokens) - 1 - 5 tokens, so that the prompt and a few new tokens fit the "
       "context and the KV pool. A prompt of that many tokens or more is refused with SGLang's "
       "text (after the check against the model's context, CTXPAR-ENGINE-005, and before the "
       "prompt plus its max_new_tokens against the pool, CTXPAR-ENGINE-006).",
       "A long document with a small --kv-cache-mib or --max-total-tokens (at dcp 1 the pool "
       "holds a rank's share of the memory only once), or beyond the model's context.",
       {"Raise --kv-cache-mib (per rank) or --max-total-tokens.",
        "Use DCP (--dcp-size) to shard the KV over more ranks: the pool then holds dcp_size times "
        "more tokens.",
        "Pass --allow-auto-truncate to keep the prompt's first tokens (room for max_new_tokens "
        "left) instead of refusing it.",
        "Shorten the prompt."},
       "ctxpar generate --max-total-tokens 256 --max-new-tokens 16 \"$(seq 1 500)\"",
       "ctxpar generate --max-total-tokens 256 --max-new-tokens 16 --allow-auto-truncate "
       "\"$(seq 1 500)\"",
       {"CTXPAR-ENGINE-005", "CTXPAR-ENGINE-006"}},
      {"CTXPAR-DTYPE-001",
       "A matmul data type the CPU engine does not compute in",
       "--dtype {dtype} is not available on ctxpar's CPU engine: use --dtype float32 (fp32 "
       "products, the default) or --dtype auto (int8 activations on the CPU's matrix units).",
       kConfig,
       "SGLang's --dtype names the data type of the weights and activations on the GPU. ctxpar's "
       "CPU engine multiplies GGUF weights in their quantized blocks either by fp32 activations "
       "(float32, transformers' tokens) or by activations quantized per 32 to int8 on AMX / "
       "AVX512-VNNI (auto); fp16 and bf16 products are not implemented, so they are refused "
       "rather than silently computed in another type.",
       "`ctxpar generate`, `ctxpar serve` or `ctxpar check --model-path M` with --dtype half, "
       "float16 or bfloat16.",
       {"Use --dtype float32 (the default) for transformers' numerics.",
        "Use --dtype auto for the matrix units' int8 path (faster prefill and batched decode)."},
       "ctxpar generate --dtype bfloat16 'Hello'",
       "ctxpar generate --dtype auto 'Hello'",
       {"CTXPAR-KV-003"}},
      {"CTXPAR-KV-001",
       "A KV page that is not a whole number of interleave blocks",
       "--page-size {page_size} must be a multiple of --dcp-kv-cache-interleave-size "
       "{interleave_size}: a page holds whole blocks of the consecutive tokens a DCP rank owns.",
       kConfig,
       "With DCP, rank r owns the tokens of positions p with (p / I) % dcp_size == r, in blocks "
       "of I = --dcp-kv-cache-interleave-size consecutive positions, and one virtual page of "
       "page_size * dcp_size tokens is one physical page on every rank. That needs each page to "
       "hold whole blocks.",
       "--dcp-kv-cache-interleave-size that does not divide --page-size (16 when unset).",
       {"Choose an interleave size that divides the page size (1, 2, 4, 8 or 16 for 16).",
        "Or set --page-size to a multiple of the interleave size (the CPU kernels read pages of "
        "a multiple of 16 fastest)."},
       "ctxpar check --tp-size 3 --dcp-size 3 --dcp-kv-cache-interleave-size 7",
       "ctxpar check --tp-size 3 --dcp-size 3 --dcp-kv-cache-interleave-size 8",
       {"CTXPAR-KV-002"}},
      {"CTXPAR-KV-002",
       "A KV budget that holds no page",
       "--kv-cache-mib {mib} holds {pages} pages of --page-size {page_size} on each rank (a page "
       "of {model}'s KV takes {page_mib} MiB over its {layers} layers); the pool needs at least "
       "{min_pages}: raise --kv-cache-mib or lower --page-size.",
       kConfig,
       "The KV pool of a rank is --kv-cache-mib MiB cut into pages of --page-size tokens of "
       "every layer. A budget that holds fewer pages than one request of one page per running "
       "request needs cannot serve anything.",
       "A very large --page-size or a tiny --kv-cache-mib.",
       {"Raise --kv-cache-mib.", "Lower --page-size (16 is the CPU kernels' tile)."},
       "ctxpar generate --page-size 100000000 'Hello'",
       "ctxpar generate --page-size 16 'Hello'",
       {"CTXPAR-KV-001", "CTXPAR-KV-005", "CTXPAR-ENGINE-006"}},
      {"CTXPAR-KV-003",
       "A KV cache data type the CPU engine does not store",
       "--kv-cache-dtype {dtype} is not available on ctxpar's CPU engine, which stores the KV "
       "cache in fp32 (auto), bf16, fp8_e4m3 or fp8_e5m2: use --kv-cache-dtype fp8_e4m3 to "
       "quarter the KV memory of a token, bf16 to halve it, or leave it at auto.",
       kConfig,
       "SGLang's fp4 KV cache is read by GPU attention kernels that dequantize it on the fly. "
       "ctxpar's CPU attention kernels read fp32, bf16 or fp8 (e4m3fn or e5m2, widened exactly "
       "with a scale of 1) K/V and have no fp4 path; an fp4 cache would be silently widened, so "
       "it is refused.",
       "`ctxpar generate`, `ctxpar serve` or `ctxpar check --model-path M` with --kv-cache-dtype "
       "fp4_e2m1.",
       {"Use --kv-cache-dtype fp8_e4m3 (a quarter of fp32's memory; K and V rounded to nearest "
        "even once, when written, and saturated at +-448) or fp8_e5m2 (range +-57344, one "
        "mantissa bit fewer).",
        "Use --kv-cache-dtype bf16 (half the memory of fp32; K and V rounded to bf16 once, when "
        "written).",
        "Or leave --kv-cache-dtype at auto (fp32).",
        "To check a launch line for a GPU, run `ctxpar check` without --model-path."},
       "ctxpar generate --kv-cache-dtype fp4_e2m1 'Hello'",
       "ctxpar generate --kv-cache-dtype fp8_e4m3 'Hello'",
       {"CTXPAR-KV-002", "CTXPAR-ENGINE-001"}},
      {"CTXPAR-KV-004",
       "A KV budget beyond what a rank can hold",
       "The KV pool would take {pages} pages ({gib} GiB) on each rank, more than {limit}: "
       "lower --kv-cache-mib to at most {max_mib}, or cap the pool with --max-total-tokens.",
       kConfig,
       "The CPU engine reserves the whole pool at start; `ctxpar generate` touches its pages as "
       "requests fill them, so a pool larger than the machine's memory would start and then fail "
       "(or be killed) when it fills, and `ctxpar serve` backs them all at start. The ranks of one "
       "machine share its memory: each may take the machine's "
       "memory divided by the ranks there (tp_size when ctxpar starts mpirun itself). A block "
       "table also addresses pages with 32-bit integers.",
       "--kv-cache-mib larger than the machine's physical memory over its ranks, or so large "
       "that the pool would have 2^31 pages or more.",
       {"Lower --kv-cache-mib (1024 by default).",
        "Or keep --kv-cache-mib and cap the pool with --max-total-tokens."},
       "ctxpar generate --kv-cache-mib 2147483647 'Hello'",
       "ctxpar generate --kv-cache-mib 4096 'Hello'",
       {"CTXPAR-KV-002", "CTXPAR-KV-005"}},
      {"CTXPAR-KV-005",
       "A --max-total-tokens below one page",
       "--max-total-tokens {tokens} is less than one page of the KV pool, {page_tokens} tokens "
       "(--page-size {page_size} on each of the {dcp_size} DCP ranks): raise --max-total-tokens to "
       "at least {page_tokens}, or lower --page-size.",
       kConfig,
       "--max-total-tokens caps the tokens the KV pool holds, in whole pages: a page of the pool "
       "is --page-size tokens on every rank of the DCP group, so page_size * dcp_size tokens. A "
       "cap below one page leaves the pool empty. A cap that is not a multiple of the page is "
       "rounded down to one, as SGLang does.",
       "--max-total-tokens smaller than --page-size times --dcp-size (16 x dcp_size by default "
       "on the CPU).",
       {"Raise --max-total-tokens to at least page_size x dcp_size.",
        "Or lower --page-size (a multiple of 16 keeps the CPU kernels' fastest page format)."},
       "ctxpar generate --max-total-tokens 3 'Hello'",
       "ctxpar generate --max-total-tokens 4096 'Hello'",
       {"CTXPAR-KV-002", "CTXPAR-KV-004"}},
      {"CTXPAR-KV-006",
       "A request whose window does not fit the sliding-window pool",
       "The request needs {needed} tokens of the sliding-window KV pool at once (a window of "
       "{window} positions and a prefill chunk of {chunk} tokens, in whole pages), more than it "
       "holds ({capacity} tokens: swa_layer_tokens).",
       kConfig,
       "A model with sliding-window layers keeps their K/V in a pool of its own, sized at "
       "--swa-full-tokens-ratio times the full-attention pool (SGLang's hybrid pools). A window "
       "layer's row sees the window before it, so a forward of a chunk holds the window and the "
       "chunk at once; a request whose window and chunk exceed the pool could never run, so it "
       "is refused at once.",
       "A small --kv-cache-mib or --swa-full-tokens-ratio with a large --chunked-prefill-size "
       "(or -1: whole prompts).",
       {"Lower --chunked-prefill-size.", "Raise --swa-full-tokens-ratio or --kv-cache-mib.",
        "Use DCP (--dcp-size): the sliding-window pool is sharded too."},
       "ctxpar generate --model-path gemma-3-270m-q4_k_m.gguf --kv-cache-mib 4 "
       "--swa-full-tokens-ratio 0.1 'Hello'",
       "ctxpar generate --model-path gemma-3-270m-q4_k_m.gguf --kv-cache-mib 64 "
       "--swa-full-tokens-ratio 0.1 'Hello'",
       {"CTXPAR-ENGINE-006", "CTXPAR-KV-002"}},
      {"CTXPAR-SPEC-001",
       "A speculative algorithm that needs a trained draft head",
       "--speculative-algorithm {algorithm} is not implemented by ctxpar's engine: only NGRAM "
       "(from the request's own prompt and output) and STANDALONE (with a draft model) draft.",
       kConfig,
       "EAGLE, EAGLE3 and NEXTN draft with a head trained on the model's hidden states (MTP); "
       "ctxpar loads none. NGRAM looks the sequence's last tokens up in the tokens it already has "
       "and STANDALONE runs a smaller model with the same vocabulary; both verify the drafts with "
       "output identical to plain decoding.",
       "`check`, `generate` or `serve` with --speculative-algorithm EAGLE, EAGLE3 or NEXTN.",
       {"Use --speculative-algorithm NGRAM (pays on repetitive output: code edits, tables, "
        "quoted documents).",
        "Use --speculative-algorithm STANDALONE --speculative-draft-model-path with a smaller "
        "model of the same vocabulary.",
        "Drop --speculative-algorithm to decode one token per step."},
       "ctxpar check --speculative-algorithm EAGLE",
       "ctxpar check --speculative-algorithm NGRAM",
       {"CTXPAR-SPEC-002", "CTXPAR-SPEC-004"}},
      {"CTXPAR-SPEC-002",
       "An NGRAM option ctxpar does not implement",
       "{option} asks for {why}; leave it unset.",
       kConfig,
       "SGLang's NGRAM grows draft trees from an n-gram cache shared by every request, ranked by "
       "frequency with PROB. ctxpar drafts one chain per step: from the request's own tokens "
       "(the longest suffix of the sequence, within the match window, that occurred before, and "
       "the tokens that followed its most recent occurrence), else from the finished requests' "
       "tokens (--speculative-ngram-capacity of them). An option that would change what SGLang "
       "drafts is refused instead of silently meaning nothing.",
       "--speculative-algorithm NGRAM with --speculative-ngram-max-bfs-breadth or "
       "--speculative-ngram-min-bfs-breadth above 1, or --speculative-ngram-match-type PROB.",
       {"Drop the option: chains of up to --speculative-num-draft-tokens - 1 drafted tokens are "
        "what ctxpar verifies."},
       "ctxpar check --speculative-algorithm NGRAM --speculative-ngram-max-bfs-breadth 10",
       "ctxpar check --speculative-algorithm NGRAM --speculative-ngram-max-bfs-breadth 1",
       {"CTXPAR-SPEC-001", "CTXPAR-SPEC-003"}},
      {"CTXPAR-SPEC-003",
       "An NGRAM match window whose minimum exceeds its maximum",
       "--speculative-ngram-min-match-window-size {min} is larger than "
       "--speculative-ngram-max-match-window-size {max}.",
       kConfig,
       "A draft matches the longest suffix of the sequence of between the minimum and the "
       "maximum window size tokens; a minimum above the maximum leaves no size to try, so "
       "nothing would ever be drafted.",
       "--speculative-algorithm NGRAM with a min match window above the max (default 12).",
       {"Lower --speculative-ngram-min-match-window-size or raise "
        "--speculative-ngram-max-match-window-size."},
       "ctxpar check --speculative-algorithm NGRAM --speculative-ngram-min-match-window-size 16",
       "ctxpar check --speculative-algorithm NGRAM --speculative-ngram-min-match-window-size 4",
       {"CTXPAR-SPEC-002"}},
      {"CTXPAR-SPEC-004",
       "STANDALONE speculative decoding without a draft model",
       "STANDALONE speculative decoding requires setting --speculative-draft-model-path.",
       kConfig,
       "STANDALONE drafts the next tokens of each request with a second, smaller model that "
       "shares the target model's vocabulary; the target verifies them. Without a draft model "
       "there is nothing to draft with.",
       "--speculative-algorithm STANDALONE without --speculative-draft-model-path.",
       {"Add --speculative-draft-model-path with a smaller model of the same vocabulary (a GGUF "
        "file or a HF checkpoint directory).",
        "Or use --speculative-algorithm NGRAM, which drafts from the request's own tokens."},
       "ctxpar check --speculative-algorithm STANDALONE",
       "ctxpar check --speculative-algorithm STANDALONE --speculative-draft-model-path draft.gguf",
       {"CTXPAR-SPEC-005", "CTXPAR-SPEC-006", "CTXPAR-SPEC-007"}},
      {"CTXPAR-SPEC-005",
       "A draft model for an algorithm that drafts without one",
       "--speculative-draft-model-path is only read by --speculative-algorithm STANDALONE; "
       "--speculative-algorithm {algorithm} drafts without a draft model.",
       kConfig,
       "NGRAM drafts from the request's own prompt and output and never loads a draft model; a "
       "draft model given beside it would silently mean nothing, so the launch line is refused.",
       "--speculative-algorithm NGRAM with --speculative-draft-model-path.",
       {"Drop --speculative-draft-model-path to draft from the request's own tokens.",
        "Or use --speculative-algorithm STANDALONE to draft with that model."},
       "ctxpar check --speculative-algorithm NGRAM --speculative-draft-model-path draft.gguf",
       "ctxpar check --speculative-algorithm STANDALONE --speculative-draft-model-path draft.gguf",
       {"CTXPAR-SPEC-004"}},
      {"CTXPAR-SPEC-006",
       "A draft model that cannot be opened",
       "The draft model --speculative-draft-model-path {path} cannot be opened: {error}",
       kConfig,
       "STANDALONE opens the draft model when the engine is launched, as it opens the target "
       "model: a GGUF file of an architecture ctxpar runs, or a HF checkpoint directory. The "
       "reason after the colon is the one the target model would get for the same file.",
       "`check --model-path`, `generate` or `serve` with --speculative-algorithm STANDALONE and "
       "a draft path that does not exist, is not a model, or is of an architecture ctxpar does "
       "not run.",
       {"Check the path, or point it at a model `ctxpar check --model-path PATH` accepts."},
       "ctxpar generate --speculative-algorithm STANDALONE --speculative-draft-model-path "
       "missing.gguf 'Hello'",
       "ctxpar generate --speculative-algorithm STANDALONE --speculative-draft-model-path "
       "SmolLM2-135M-Instruct.Q4_1.gguf 'Hello'",
       {"CTXPAR-SPEC-004", "CTXPAR-SPEC-007"}},
      {"CTXPAR-SPEC-007",
       "A draft model whose vocabulary is not the target model's",
       "The draft model {draft} does not share the vocabulary of the target model {target}: "
       "{difference}.",
       kConfig,
       "The draft model proposes token ids that the target model verifies: an id must mean the "
       "same token to both, so the two vocabularies must have the same size and, where both "
       "models carry a tokenizer, the same text for every id. A draft of another tokenizer "
       "(another model family) would propose ids that mean other tokens and never be accepted.",
       "--speculative-algorithm STANDALONE with a draft model of another family or another "
       "tokenizer than the target model.",
       {"Use a draft model of the target's family, converted with the same tokenizer (for "
        "SmolLM2-1.7B, SmolLM2-135M).",
        "Or use --speculative-algorithm NGRAM, which needs no draft model."},
       "ctxpar generate --speculative-algorithm STANDALONE --speculative-draft-model-path "
       "gemma-3-270m-q4_k_m.gguf 'Hello'",
       "ctxpar generate --speculative-algorithm STANDALONE --speculative-draft-model-path "
       "SmolLM2-135M-Instruct.Q4_1.gguf 'Hello'",
       {"CTXPAR-SPEC-004", "CTXPAR-SPEC-006"}},
      {"CTXPAR-MODEL-001",
       "--model-arch that contradicts the model",
       "--model-arch {given} does not match the model, whose architecture is {architecture}.",
       kConfig,
       "--model-arch tells `ctxpar check` which model-specific rules to apply when no model is "
       "given. With a model, its own architecture decides; a different --model-arch would apply "
       "rules of a model that does not run.",
       "--model-arch together with --model-path (or the default model) of another architecture.",
       {"Drop --model-arch when a model is given.",
        "Or check the launch line without the model: `ctxpar check --model-arch ...`."},
       "ctxpar generate --model-arch DeepseekV4ForCausalLM 'Hello'",
       "ctxpar generate 'Hello'",
       {"CTXPAR-MODEL-005"}},
      {"CTXPAR-MODEL-002",
       "The TP size does not divide the attention heads",
       "Total number of attention heads ({num_heads}) must be divisible by tensor parallel size "
       "({tp_size}).",
       kConfig,
       "Tensor parallelism gives every rank an equal share of the query heads (the columns of "
       "q_proj and the rows of o_proj), so the head count must be a multiple of --tp-size.",
       "--tp-size that does not divide the model's num_attention_heads; SmolLM2-135M has 9 "
       "heads, so tp 1, 3 and 9 work.",
       {"Choose --tp-size among the divisors of the head count."},
       "ctxpar generate --tp-size 2 'Hello'",
       "ctxpar generate --tp-size 3 'Hello'",
       {"CTXPAR-MODEL-003", "CTXPAR-LAYOUT-003"}},
      {"CTXPAR-MODEL-003",
       "KV heads that TP can neither split nor replicate",
       "tp_size ({tp_size}) must divide the model's KV heads ({num_kv_heads}) or be a multiple of "
       "them: each rank holds whole KV heads.",
       kConfig,
       "With tp_size at most the KV head count, each rank holds num_kv_heads / tp_size KV heads; "
       "with more ranks than KV heads, each KV head is replicated over tp_size / num_kv_heads "
       "ranks (as SGLang and vLLM do). Other sizes would split a KV head between ranks.",
       "--tp-size that neither divides nor is a multiple of num_key_value_heads.",
       {"Choose --tp-size among the divisors or multiples of the KV head count (SmolLM2-135M: 3 "
        "KV heads, so 1, 3, 9, ...)."},
       "ctxpar generate --model-path model-with-8-heads-and-3-kv-heads.gguf --tp-size 4 'Hello'",
       "ctxpar generate --model-path model-with-8-heads-and-3-kv-heads.gguf --tp-size 1 'Hello'",
       {"CTXPAR-MODEL-002", "CTXPAR-MODEL-004"}},
      {"CTXPAR-MODEL-004",
       "A DCP group wider than a replicated KV head",
       "dcp_size ({dcp_size}) must divide tp_size / num_kv_heads ({replicas}): with more TP "
       "ranks than KV heads, a DCP group shards the tokens of one KV head over the ranks that "
       "would otherwise replicate it.",
       kConfig,
       "With tp_size a multiple of the KV heads, each KV head is stored by tp_size / num_kv_heads "
       "ranks. DCP removes that duplication: the ranks of a DCP group hold disjoint shards of "
       "the tokens of their one KV head, so the same --kv-cache-mib holds dcp_size times the "
       "tokens. A DCP group must therefore lie within the ranks of one KV head.",
       "--dcp-size above (or not dividing) tp_size / num_kv_heads, e.g. SmolLM2 (3 KV heads) "
       "with --tp-size 9 --dcp-size 9.",
       {"Use --dcp-size dividing tp_size / num_kv_heads (SmolLM2 at --tp-size 9: 1 or 3)."},
       "ctxpar generate --tp-size 9 --dcp-size 9 'Hello'",
       "ctxpar generate --tp-size 9 --dcp-size 3 'Hello'",
       {"CTXPAR-MODEL-003", "CTXPAR-LAYOUT-001"}},
      {"CTXPAR-MODEL-005",
       "A flag for a feature this model does not have",
       "{flag} applies to {feature}; {architecture} has none: drop {flag}.",
       kConfig,
       "Some launch flags only mean something for some architectures: expert parallelism and "
       "the MoE all-to-all backends for mixture-of-experts models, prefill context parallelism "
       "for the DeepSeek models. A flag the run cannot honour is refused rather than ignored.",
       "--ep-size, --moe-a2a-backend, --moe-dense-tp-size on a dense model; "
       "--enable-prefill-cp, --attn-cp-size or --enable-dp-attention on a model that does not "
       "implement them.",
       {"Drop the flag for this model."},
       "ctxpar generate --ep-size 3 --moe-a2a-backend deepep 'Hello'",
       "ctxpar generate 'Hello'",
       {"CTXPAR-MODEL-001"}},
      {"CTXPAR-MODEL-006",
       "A model shape that the sharded kernels cannot split",
       "{what} of {architecture} is {value}, but {rule}.",
       kConfig,
       "The weights stay in their quantised 32-element blocks and are sharded by whole blocks; "
       "some shapes cannot be cut that way for the chosen tensor-parallel size.",
       "A model whose head dimension or hidden size is not a multiple of 32, or whose MLP is "
       "too narrow for --tp-size.",
       {"Use a smaller --tp-size.", "Or a model with block-aligned shapes."},
       "ctxpar generate --model-path model-with-head-dim-80.gguf 'Hello'",
       "ctxpar generate --model-path model-with-head-dim-64.gguf 'Hello'",
       {"CTXPAR-MODEL-002"}},
      {"CTXPAR-MODEL-008",
       "A model path that holds no model ctxpar reads",
       "{path} is {holds}: ctxpar reads a GGUF file (Llama, Qwen, Phi-3, Gemma 3) or a HF "
       "checkpoint "
       "directory with config.json and *.safetensors (DeepSeek-V3 family).",
       kConfig,
       "The loader is chosen by what the path holds; this path holds neither kind.",
       "--model-path naming a directory without config.json, or a file of another format.",
       {"Point --model-path at the GGUF file itself, or at the checkpoint directory."},
       "ctxpar generate --model-path ~/.cache/ctxpar/models 'Hello'",
       "ctxpar generate --model-path ~/.cache/ctxpar/models/SmolLM2-135M-Instruct.Q4_1.gguf "
       "'Hello'",
       {"CTXPAR-GGUF-001", "CTXPAR-MODEL-010"}},
      {"CTXPAR-MODEL-010",
       "A GGUF file of an architecture ctxpar does not run",
       "{path}: general.architecture is '{architecture}'; ctxpar runs GGUF models of the "
       "architectures {known}.",
       kConfig,
       "A GGUF file names its network in general.architecture, and ctxpar picks the model code "
       "by that name from its architecture registry. A file of another architecture has tensors "
       "and hyperparameters that no registered model reads.",
       "--model-path naming a GGUF file of an architecture outside the list (glm4moe, "
       "falcon, ...).",
       {"Use a GGUF file of one of the listed architectures (SmolLM2 is llama, Gemma 3 is "
        "gemma3).",
        "`ctxpar check --model-path FILE` tells at once whether a file is one ctxpar runs."},
       "ctxpar generate --model-path glm-4.5-air-q4_k_m.gguf 'Hello'",
       "ctxpar generate --model-path gemma-3-270m-q4_k_m.gguf 'Hello'",
       {"CTXPAR-MODEL-008", "CTXPAR-GGUF-004"}},
      {"CTXPAR-MODEL-012",
       "An expert-parallel size the model cannot place",
       "--ep-size {ep_size}: {architecture} places whole experts on the tp_size ({tp_size}) "
       "ranks, so --ep-size must be 1 or {tp_size}.",
       kConfig,
       "A GGUF mixture-of-experts model (Qwen3-MoE) gives each rank of the TP group whole "
       "experts, expert e to rank e * tp_size / experts, and adds their outputs exactly, so the "
       "tokens do not depend on tp_size. Expert groups of another size are not implemented.",
       "--ep-size other than 1 or --tp-size on a GGUF mixture-of-experts model.",
       {"Pass --ep-size equal to --tp-size, or leave it at 1: both run the same placement."},
       "ctxpar generate --model-path Qwen3-30B-A3B-Q4_K_M.gguf --tp-size 4 --ep-size 2 'Hello'",
       "ctxpar generate --model-path Qwen3-30B-A3B-Q4_K_M.gguf --tp-size 4 --ep-size 4 'Hello'",
       {"CTXPAR-MODEL-005", "CTXPAR-DSV3-002"}},
      {"CTXPAR-MODEL-011",
       "A tensor or key of the file that the model cannot take",
       "The model file {path} holds {item}, which {problem}.",
       kConfig,
       "Every tensor of a GGUF file is either a weight the architecture's forward reads, with "
       "the shape and a type its kernels take, or the file is refused before any compute: a "
       "tensor that were ignored (a RoPE scaling table, a bias, the layers past block_count) "
       "would change the output with no error. So is every key under the architecture's "
       "prefix: one the model does not read (a sliding window, an expert count) is refused; "
       "general.* and tokenizer.* keys are the file's description and the tokenizer's. `ctxpar "
       "check --model-path` applies the same checks as generate and serve.",
       "A weight type without a matmul kernel (the matmuls take F32, F16, BF16, Q4_0, Q4_1, "
       "Q5_0, Q5_1, Q8_0, Q2_K to Q6_K, IQ4_NL, IQ4_XS and MXFP4; requantize others, such as IQ2 "
       "and "
       "IQ3, with llama-quantize); a tensor of another "
       "architecture or of a layer past block_count; a shape that disagrees with the "
       "hyperparameters; a norm vector that is not F32; a key of a feature the architecture's "
       "model does not implement.",
       {"Convert the checkpoint again with llama.cpp's convert_hf_to_gguf.py, or requantize "
        "it to a listed type with llama-quantize.",
        "`ctxpar check --model-path FILE` names the first tensor at fault."},
       "ctxpar generate --model-path model-iq4_xs.gguf 'Hello'",
       "ctxpar generate --model-path model-q4_k_m.gguf 'Hello'",
       {"CTXPAR-MODEL-010", "CTXPAR-GGUF-006"}},
  };
}

}  // namespace ctxpar::core_internal
