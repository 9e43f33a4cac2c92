// The catalog entries of errors raised while running: the CLI's own input, model files,
// processes and collectives. The configuration entries are in error_catalog.cpp.
#include "core/error_catalog_internal.h"

namespace ctxpar::core_internal {
namespace {

constexpr StatusCode kInput = StatusCode::kInvalidArgument;
constexpr StatusCode kSystem = StatusCode::kUnavailable;
constexpr StatusCode kCorrupt = StatusCode::kDataLoss;
constexpr StatusCode kUnsupported = StatusCode::kUnimplemented;
constexpr StatusCode kMissing = StatusCode::kNotFound;
constexpr StatusCode kStopped = StatusCode::kFailedPrecondition;

}  // namespace

std::vector<CatalogEntry> RuntimeCatalogEntries() {
  return {
      {"CTXPAR-CHAT-001",
       "A conversation for a model that carries no chat template",
       "The model carries no chat template (its GGUF has no tokenizer.chat_template), so a "
       "conversation cannot be rendered for it.",
       kInput,
       "--chat and /v1/chat/completions render the messages with the template the model file "
       "carries (or the one --chat-template names), never with a guessed one: a wrong turn "
       "format gives a model text it was not trained on. Base (pretrained) models are usually "
       "converted without a template: they continue text and have no turn format.",
       "`ctxpar generate --chat` or a chat request on a model whose GGUF lacks "
       "tokenizer.chat_template, such as the base gemma-3-270m.",
       {"Drop --chat: the prompt is then plain text that the model continues.",
        "Use the instruction-tuned model's GGUF (gemma-3-270m-it), which carries its template.",
        "Give a template with --chat-template FILE.",
        "Render the turns yourself and send them to /v1/completions, which reads control "
        "tokens written in the prompt (Gemma: <start_of_turn>user\\n...<end_of_turn>\\n"
        "<start_of_turn>model\\n)."},
       "ctxpar generate --model-path gemma-3-270m-q4_k_m.gguf --chat 'Hello'",
       "ctxpar generate --model-path gemma-3-270m-q4_k_m.gguf 'Hello'",
       {"CTXPAR-CHAT-002", "CTXPAR-CHAT-004", "CTXPAR-HTTP-008"}},
      {"CTXPAR-CHAT-002",
       "A chat template that ctxpar's Jinja engine cannot parse",
       "The chat template cannot be parsed by ctxpar's Jinja engine: {detail}.",
       kUnsupported,
       "ctxpar renders the model's Jinja chat template (tokenizer.chat_template, or the file of "
       "--chat-template) with llama.cpp's Jinja engine, the one llama-server uses, as "
       "transformers' apply_chat_template renders it. A template with a syntax error, or with a "
       "construct the engine does not implement, is refused when the model is loaded rather "
       "than rendered wrongly.",
       "A hand-edited template with an unclosed for or if block, a misspelt tag, or "
       "Jinja features beyond chat templates (template inheritance, includes).",
       {"Fix the template and give it with --chat-template FILE.",
        "Render the turns yourself and send them to /v1/completions as the prompt.",
        "Drop --chat and give a plain-text prompt."},
       "ctxpar generate --model-path m.gguf --chat-template broken.jinja --chat 'Hello'",
       "ctxpar generate --model-path m.gguf --chat-template fixed.jinja --chat 'Hello'",
       {"CTXPAR-CHAT-001", "CTXPAR-HTTP-008"}},
      {"CTXPAR-CHAT-003",
       "A conversation that the model's chat template refuses",
       "The model's chat template refuses this conversation: {detail}.",
       kInput,
       "Some templates check the conversation and raise an error (raise_exception) instead of "
       "rendering it, and ctxpar does what they do; a conversation the template fails on "
       "(a value of a type it cannot use) is refused the same way. Gemma's templates want the "
       "turns to alternate user, assistant, user, ... after an optional first system message "
       "(Gemma 3 folds that one into the first user turn; Gemma 2 refuses it); Llama 3.1's "
       "takes one tool call per assistant turn.",
       "A chat request whose messages start with an assistant turn, hold two user turns in a "
       "row, or put a system message anywhere but first, for a Gemma model.",
       {"Merge consecutive messages of the same role into one.",
        "Put the system message first, or fold it into the first user message yourself."},
       "ctxpar serve --model-path gemma-3-270m-it.gguf & curl localhost:30000/v1/chat/completions "
       "-d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": "
       "\"user\", \"content\": \"Hello?\"}]}'",
       "ctxpar serve --model-path gemma-3-270m-it.gguf & curl localhost:30000/v1/chat/completions "
       "-d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\\nHello?\"}]}'",
       {"CTXPAR-CHAT-002"}},
      {"CTXPAR-CHAT-004",
       "A --chat-template file that cannot be read",
       "The chat template file {path} (--chat-template) cannot be read: {reason}.",
       kInput,
       "--chat-template names a Jinja file that replaces the model's own chat template, as "
       "SGLang's flag does. ctxpar has no built-in templates to name instead: the value must be "
       "a readable, non-empty file.",
       "A misspelt path, a directory, a file without read permission, or a template name such "
       "as 'chatml' that SGLang maps to a built-in template.",
       {"Give the path of a .jinja file (the chat_template of the model's "
        "tokenizer_config.json, or one of llama.cpp's models/templates).",
        "Leave --chat-template out to use the template the GGUF carries."},
       "ctxpar serve --model-path m.gguf --chat-template chatml",
       "ctxpar serve --model-path m.gguf --chat-template ./chatml.jinja",
       {"CTXPAR-CHAT-001", "CTXPAR-CHAT-002"}},
      {"CTXPAR-COMM-001",
       "A collective waited past its deadline for ranks that do not answer",
       "{collective} on rank {rank} waited {seconds} s for {silent} of {size}, which did not "
       "answer; the job stops (the deadline is CTXPAR_COLLECTIVE_TIMEOUT seconds).",
       kSystem,
       "Every rank of a communicator must enter each collective. This rank waited longer than "
       "the deadline, then asked every other rank whether it was alive: the ranks named did not "
       "answer within two seconds, so they are stopped (SIGSTOP, a debugger), hung in "
       "computation or I/O, or on a node that stopped responding. Waiting on would keep the "
       "other ranks polling forever, so the job ends.",
       "A rank stopped with kill -STOP or Ctrl-Z, a node under memory pressure swapping, a "
       "network partition between nodes, or a step so slow on one rank that it exceeds the "
       "deadline (default 300 s).",
       {"Look at the named rank: its host, whether it was stopped or swapping.",
        "If the wait is legitimate (a very slow step), raise the deadline: "
        "CTXPAR_COLLECTIVE_TIMEOUT=1800, or 0 for none."},
       "mpiexec -n 2 ctxpar generate --tp-size 2 'Hello'  # rank 1 stopped with kill -STOP",
       "mpiexec -x CTXPAR_COLLECTIVE_TIMEOUT=1800 -n 2 ctxpar generate --tp-size 2 'Hello'",
       {"CTXPAR-COMM-002", "CTXPAR-COMM-003"}},
      {"CTXPAR-COMM-002",
       "A collective waited past its deadline while every rank answers",
       "{collective} on rank {rank} waited {seconds} s although every rank answers: the ranks "
       "are waiting in different collectives; the job stops.",
       kSystem,
       "After the deadline this rank asked every other rank whether it was alive, and all "
       "answered: they are all waiting, but not in the same collective. The ranks took "
       "different paths (one failed a step the others passed, or called collectives in another "
       "order), which can never complete.",
       "A failure on one rank only (it went on to report its error while the others wait in "
       "the next step), or a ctxpar bug in the order of collectives.",
       {"Read the other ranks' errors above this one: the first error is the cause.",
        "If no rank reports an error, report this message with the command line: it is a "
        "ctxpar bug."},
       "mpiexec -n 2 ctxpar generate --tp-size 2 'Hello'  # rank 1 fails alone",
       "mpiexec -n 2 ctxpar generate --tp-size 2 'Hello'  # after fixing what rank 1 reported",
       {"CTXPAR-COMM-001"}},
      {"CTXPAR-COMM-003",
       "CTXPAR_COLLECTIVE_TIMEOUT is not a number of seconds",
       "CTXPAR_COLLECTIVE_TIMEOUT={value} is not a number of seconds: give a number >= 0 (0: no "
       "deadline).",
       kInput,
       "CTXPAR_COLLECTIVE_TIMEOUT sets how long a rank waits in a collective before it ends the "
       "job (default 300 seconds). It is read when MPI starts and must be a plain decimal "
       "number of seconds.",
       "A unit suffix (300s, 5m), an empty or negative value, or a typo in a launch script.",
       {"Give seconds as a number: CTXPAR_COLLECTIVE_TIMEOUT=600.",
        "Use 0 to wait without a deadline."},
       "mpiexec -x CTXPAR_COLLECTIVE_TIMEOUT=5m -n 2 ctxpar generate --tp-size 2 'Hello'",
       "mpiexec -x CTXPAR_COLLECTIVE_TIMEOUT=300 -n 2 ctxpar generate --tp-size 2 'Hello'",
       {"CTXPAR-COMM-001"}},
      {"CTXPAR-EXPLAIN-001",
       "The message given to explain is too long",
       "The message is longer than {limit} bytes, the most ctxpar explain --message reads; paste "
       "the lines of the error rather than the whole log.",
       kInput,
       "`ctxpar explain --message` matches a pasted error against every message template of the "
       "catalog. It reads a bounded amount of text so that any input is answered at once; an "
       "error message is a few hundred bytes, so a longer text is a log or a file, not one error.",
       "A whole log or file is piped to `ctxpar explain --message -`, or passed with "
       "--message \"$(cat log)\".",
       {"Paste only the error's lines (the line before `run: ctxpar explain ...` holds it).",
        "Or filter the log first, e.g. grep -m1 -B2 'ctxpar explain' log."},
       "ctxpar explain --message - < whole-run.log",
       "ctxpar explain --message \"tp_size (6) must be divisible by dcp_size (4).\"",
       {"CTXPAR-FLAG-004"}},
      {"CTXPAR-FLAG-007",
       "A thread count the machine cannot run",
       "Invalid value {value} for {flag}: out of range for this machine, which has {max} hardware "
       "threads; valid values: {valid}.",
       kInput,
       "--threads is the number of threads per process (per rank under MPI). More threads than "
       "the machine's hardware threads only take turns on the same cores, and each one costs a "
       "process slot and a stack, so ctxpar refuses counts above the machine's. Zero or a "
       "negative count has no meaning: leaving --threads out asks for the default.",
       "A thread count copied from a bigger machine, a negative number from a script, or a very "
       "large number (--threads 100000) meant as 'all'.",
       {"Leave --threads out: generate takes cores / ranks, which is what the model runs best "
        "with.",
        "Give at most the machine's hardware threads (nproc)."},
       "ctxpar bench attention --threads 100000",
       "ctxpar bench attention --threads 2",
       {"CTXPAR-SYS-001", "CTXPAR-FLAG-008"}},
      {"CTXPAR-FLAG-008",
       "A benchmark option got a value it cannot use",
       "Invalid value {value} for {flag}: {reason}; valid values: {valid}.",
       kInput,
       "The benchmarks' own options (context lengths, thread lists, durations) are read whole: "
       "a count is digits with an optional k (times 1024), a duration a finite number of "
       "seconds. A value that only starts like one (1e9 read as 1) or a NaN that passes every "
       "comparison would run a benchmark that measures something else than asked.",
       "ctxpar bench attention --contexts 1e9 (exponent notation), --contexts 4.5k, an empty "
       "item in a list (4k,,8k), or ctxpar bench combine --seconds nan / inf.",
       {"Write counts in digits with an optional k: --contexts 4k,32k,131072.",
        "Give durations as plain numbers within the range the message states."},
       "ctxpar bench attention --contexts 1e9",
       "ctxpar bench attention --contexts 128k",
       {"CTXPAR-FLAG-007", "CTXPAR-FLAG-002"}},
      {"CTXPAR-FLAG-009",
       "An unknown option where a positional argument may start with '-'",
       "Unknown option {argument} for ctxpar {command}; run: ctxpar {command} --help to list the "
       "accepted flags. To pass a {positional} that starts with '-', put it after --: ctxpar "
       "{command} [flags] -- {argument}",
       kInput,
       "The command line holds a word that starts with '-' and is not one of the command's "
       "flags. The command also takes a positional argument (generate's prompt), and a prompt "
       "may itself start with '-'; everything after a lone -- is read as positional, never as a "
       "flag.",
       "A misspelled flag (generate --max-tokens 8 instead of --max-new-tokens 8), a flag of "
       "another tool, or a prompt such as '-x marks the spot' given without --.",
       {"Fix the flag's spelling; `ctxpar generate --help` lists the flags.",
        "Put a prompt that starts with '-' after --: ctxpar generate --max-new-tokens 8 -- "
        "'-x marks the spot'."},
       "ctxpar generate --max-new-tokens 8 '-x marks the spot'",
       "ctxpar generate --max-new-tokens 8 -- '-x marks the spot'",
       {"CTXPAR-FLAG-004", "CTXPAR-FLAG-005"}},
      {"CTXPAR-GGUF-001",
       "The model file cannot be opened",
       "Cannot open the model file {file}: {reason}.",
       kInput,
       "ctxpar memory-maps the GGUF model file read-only. The operating system refused: the path "
       "does not exist, is a directory or another non-regular file, is not readable by this "
       "user, or cannot be mapped.",
       "A wrong --model-path or CTXPAR_MODEL, a model that was never downloaded (the default "
       "path is ~/.cache/ctxpar/models/SmolLM2-135M-Instruct.Q4_1.gguf), or a file without read "
       "permission. Under MPI every rank opens the file, so it must exist on every node.",
       {"Check the path the message names; pass --model-path or set CTXPAR_MODEL.",
        "Fetch the default model with scripts/fetch-model.sh.",
        "Across nodes, put the file at the same path on every node (or on a shared file "
        "system)."},
       "ctxpar generate --model-path /models/missing.gguf 'Hello'",
       "ctxpar generate --model-path ~/.cache/ctxpar/models/SmolLM2-135M-Instruct.Q4_1.gguf "
       "'Hello'",
       {"CTXPAR-GGUF-002", "CTXPAR-GGUF-003"}},
      {"CTXPAR-GGUF-002",
       "The model file is not a valid GGUF file",
       "The model file {file} is not a valid GGUF file: {detail}.",
       kCorrupt,
       "The file opened, but its bytes do not form a GGUF file: the reader checks every count, "
       "length and offset before it uses it, and that each tensor's data lies inside the data "
       "section with bytes of its own (tensors may not overlap). The detail names the field, "
       "its offset and the rule it breaks.",
       "A download that stopped part way (the file is shorter than its header says), a file "
       "that is not a model at all, or one written by a broken converter or edited by hand "
       "(overlapping or out-of-range tensor offsets).",
       {"Compare the file's size and checksum with the source's; download it again if they "
        "differ.",
        "If it came from a converter, convert again with a current llama.cpp "
        "(convert_hf_to_gguf.py) and report the detail to the converter's authors."},
       "ctxpar generate --model-path truncated.gguf 'Hello'",
       "ctxpar generate --model-path SmolLM2-135M-Instruct.Q4_1.gguf 'Hello'",
       {"CTXPAR-GGUF-001", "CTXPAR-GGUF-003"}},
      {"CTXPAR-GGUF-003",
       "A GGUF variant that ctxpar does not read",
       "The model file {file} is a GGUF file that ctxpar cannot read: {detail}.",
       kUnsupported,
       "ctxpar reads little-endian GGUF files of versions 2 and 3, which is what llama.cpp has "
       "written since 2023. Version 1 (32-bit counts) and big-endian files are well-formed but "
       "not supported.",
       "A very old GGUF file (version 1), or one converted for a big-endian machine (s390x).",
       {"Convert the model again with a current llama.cpp, on a little-endian machine."},
       "ctxpar generate --model-path model-v1.gguf 'Hello'",
       "ctxpar generate --model-path model-v3.gguf 'Hello'",
       {"CTXPAR-GGUF-002"}},
      {"CTXPAR-GGUF-004",
       "A metadata key the model needs is missing",
       "The model file {file} has no metadata key {key}.",
       kMissing,
       "The model's hyperparameters and tokenizer are read from the GGUF metadata under fixed "
       "names (<architecture>.embedding_length, tokenizer.ggml.tokens, ...). The named key is "
       "not in the file.",
       "A GGUF file of an architecture ctxpar does not run (its keys have another prefix), or "
       "a file written by a converter that left the key out.",
       {"Check the file's architecture (general.architecture); ctxpar runs Llama models.",
        "Convert the model again with a current llama.cpp, which writes every key."},
       "ctxpar generate --model-path no-tokenizer.gguf 'Hello'",
       "ctxpar generate --model-path SmolLM2-135M-Instruct.Q4_1.gguf 'Hello'",
       {"CTXPAR-GGUF-005", "CTXPAR-GGUF-006"}},
      {"CTXPAR-GGUF-005",
       "A metadata key has the wrong type",
       "The model file {file} stores {key} as {type}, but it must be {wanted}.",
       kInput,
       "GGUF metadata values are typed (u32, f32, string, array[...]). ctxpar reads each key "
       "with the types llama.cpp writes for it and refuses others rather than convert them.",
       "A file written by a converter that used another type (a string where a number belongs, "
       "an array of the wrong element type).",
       {"Convert the model again with a current llama.cpp.",
        "If the file is right by the GGUF specification, report the key and type."},
       "ctxpar generate --model-path odd-types.gguf 'Hello'",
       "ctxpar generate --model-path SmolLM2-135M-Instruct.Q4_1.gguf 'Hello'",
       {"CTXPAR-GGUF-004", "CTXPAR-GGUF-006"}},
      {"CTXPAR-GGUF-006",
       "A hyperparameter or tensor of the model breaks a rule",
       "The model file {file} has {item} = {value}, but {rule}.",
       kInput,
       "ctxpar checks the model's hyperparameters when it loads them: counts must be positive "
       "and fit the engine, the floating-point ones (RoPE base frequency, RMS norm epsilon) "
       "finite and within their range, and related ones consistent (the embedding length a "
       "multiple of the head count, ...). A value that breaks a rule would give NaN logits or "
       "garbage without an error, so the file is refused up front.",
       "A corrupted or hand-edited file (a NaN or negative value), or a converter bug.",
       {"Look up the model's published configuration (config.json: rope_theta, rms_norm_eps, "
        "...) and compare it with the value the message names.",
        "Convert the model again with a current llama.cpp."},
       "ctxpar generate --model-path nan-rope.gguf 'Hello'",
       "ctxpar generate --model-path SmolLM2-135M-Instruct.Q4_1.gguf 'Hello'",
       {"CTXPAR-GGUF-004", "CTXPAR-MODEL-009"}},
      {"CTXPAR-GGUF-007",
       "A tensor the model needs is missing",
       "The model file {file} has no tensor {tensor}.",
       kMissing,
       "The model's weights are looked up by their GGUF tensor names (token_embd.weight, "
       "blk.0.attn_q.weight, ...). The named tensor is not in the file.",
       "A file of another architecture, a partial file (a split GGUF of which only the first "
       "part was given), or a converter that named tensors differently.",
       {"Give the whole model: merge split GGUF files with llama-gguf-split --merge.",
        "Check general.architecture: ctxpar runs Llama models."},
       "ctxpar generate --model-path model-00001-of-00002.gguf 'Hello'",
       "ctxpar generate --model-path model-merged.gguf 'Hello'",
       {"CTXPAR-GGUF-004", "CTXPAR-GGUF-002"}},
      {"CTXPAR-GGUF-008",
       "The model's tokenizer cannot be used",
       "The model file {file} holds a tokenizer that ctxpar cannot use: {detail}.",
       kInput,
       "ctxpar builds the model's tokenizer from the tokenizer.ggml.* metadata and checks it "
       "before any compute: the model type must be byte-level BPE ('gpt2'), Gemma 4's BPE "
       "('gemma4'), SentencePiece ('llama') or WordPiece ('bert'); a BPE vocabulary needs its "
       "merges, each joining "
       "two tokens into a third, and a pre-tokenizer ctxpar implements (tokenizer.ggml.pre: "
       "llama-bpe, qwen2, qwen35, deepseek-llm, deepseek-coder, deepseek-v3, falcon, gpt-2, mpt, "
       "starcoder, smollm, command-r, default, ...); a SentencePiece vocabulary needs one score "
       "per token, none NaN (the scores order its merges); token ids must be in range.",
       "A model with another tokenizer (tokenizer.ggml.model = 't5', 'rwkv', 'plamo2', ...), a "
       "pre-tokenizer ctxpar does not implement, or a damaged vocabulary (merges or scores "
       "removed, NaN scores).",
       {"Use a model with a byte-level BPE tokenizer (Llama 3, Qwen, DeepSeek, SmolLM2, ...), "
        "Gemma 4's, or a SentencePiece one (Gemma 3, Llama 2, Phi-3).",
        "Convert the model again with a current llama.cpp if the vocabulary is damaged."},
       "ctxpar generate --model-path t5-unigram.gguf 'Hello'",
       "ctxpar generate --model-path SmolLM2-135M-Instruct.Q4_1.gguf 'Hello'",
       {"CTXPAR-GGUF-004", "CTXPAR-GGUF-005"}},
      {"CTXPAR-MODEL-009",
       "The model computed values that are not finite",
       "The model {file} computed values that are not finite in {what}: {count} of them, the "
       "first at index {index} ({value}).",
       kCorrupt,
       "The forward pass produced NaN or infinity. Sampling from such logits would print "
       "nothing or garbage, so generation stops with this error instead, naming where the "
       "values were first seen (a layer's output, or the logits).",
       "Weights or norms that hold NaN or huge values (a damaged file), hyperparameters that "
       "passed the load checks but are extreme, or an overflow in a kernel.",
       {"Check the file against its source (size, checksum) and download or convert it again.",
        "Run with --llama-cpp-numerics or fewer threads to see whether a kernel is at fault, "
        "and report it with the layer the message names."},
       "ctxpar generate --model-path damaged.gguf 'Hello'",
       "ctxpar generate --model-path SmolLM2-135M-Instruct.Q4_1.gguf 'Hello'",
       {"CTXPAR-GGUF-006", "CTXPAR-GGUF-002"}},
      {"CTXPAR-RUN-001",
       "The run was interrupted",
       "Interrupted by {signal} after {tokens} generated tokens.",
       kStopped,
       "ctxpar stops a run on SIGINT (Ctrl-C) or SIGTERM: every rank finishes the token in "
       "progress, the ranks agree to stop at the same token, the output line is ended and the "
       "exit status is the shell's for that signal (130 for SIGINT, 143 for SIGTERM). The MPI "
       "job ends normally, so its shared memory is released. A second signal stops the ranks "
       "at once.",
       "Ctrl-C in the terminal, kill or timeout(1) sending SIGTERM, or a job scheduler ending "
       "the job.",
       {"Nothing is wrong; run the command again to generate the whole answer.",
        "To bound the output instead, pass --max-new-tokens."},
       "ctxpar generate --tp-size 2 'Tell me a long story'  # then Ctrl-C",
       "ctxpar generate --tp-size 2 --max-new-tokens 64 'Tell me a long story'",
       {"CTXPAR-RUN-002"}},
      {"CTXPAR-RUN-002",
       "The MPI launcher cannot be started",
       "Cannot run {launcher} to start {ranks} ranks: {reason}; a run over several ranks needs "
       "Open MPI (apt-get install -y openmpi-bin), or CTXPAR_MPIRUN naming its mpirun.",
       kSystem,
       "With --tp-size above 1 and no MPI job around it, ctxpar starts its ranks itself by "
       "running mpirun (or the program CTXPAR_MPIRUN names) on its own executable. That program "
       "could not be run.",
       "Open MPI is not installed, mpirun is not on PATH, or CTXPAR_MPIRUN names a file that "
       "does not exist or is not executable.",
       {"Install Open MPI: apt-get install -y openmpi-bin libopenmpi-dev.",
        "Or set CTXPAR_MPIRUN to the full path of Open MPI's mpirun."},
       "ctxpar generate --tp-size 2 'Hello'  # no mpirun on PATH",
       "ctxpar generate --tp-size 2 'Hello'  # after apt-get install -y openmpi-bin",
       {"CTXPAR-RUN-001"}},
      {"CTXPAR-RUN-003",
       "A rank died",
       "Rank {rank} (pid {pid}, host {host}) {how}; the job stops.",
       kSystem,
       "`ctxpar serve` and `ctxpar generate` over several ranks need every one of them for each "
       "step. Rank 0 watches the other ranks: those of its machine through their pids, those of "
       "other hosts through a connection each holds to rank 0, which closes when the process "
       "dies or its host goes down. When one dies rank 0 prints this line; `serve` ends every "
       "open request (a stream with a final event carrying this error and [DONE], any other "
       "with 503) and exits, `generate` exits at once, on which mpirun ends the job.",
       "The rank was killed (kill -9, the kernel's out-of-memory killer), crashed, or its host "
       "went down or rebooted.",
       {"Read the rank's signal: SIGKILL without a kill of your own is often the out-of-memory "
        "killer (see dmesg on that host); lower --kv-cache-mib.",
        "A lost connection: check that host (is it up, did its ranks crash?) before restarting.",
        "Restart the job; a crash with SIGSEGV or SIGABRT is a bug to report with the log."},
       "ctxpar serve --tp-size 3 --dcp-size 3  # then kill -9 of rank 2",
       "ctxpar serve --tp-size 3 --dcp-size 3  # restarted by its supervisor",
       {"CTXPAR-ENGINE-014", "CTXPAR-COMM-001"}},
      {"CTXPAR-RUN-004",
       "A rank on another host went silent",
       "Rank {rank} (pid {pid}, host {host}) has not been heard from for {seconds} s: the link "
       "to its host is down or the host has stalled; the job stops.",
       kSystem,
       "Every rank on another host than rank 0 sends rank 0 a heartbeat twice a second over "
       "its own connection. A link taken down or a partitioned network closes no connection, so "
       "a rank's death would otherwise show only when a collective times out; five seconds "
       "without a heartbeat end the job instead (`serve` ends every open request with this "
       "error first). mpirun may then wait for its daemon on that host: ctxpar stops mpirun "
       "itself once rank 0 has ended.",
       "A network cable or switch port down, a firewall change, a host frozen (out of memory, "
       "a hung kernel) or a rank stopped with SIGSTOP.",
       {"Check the link to that host (ping it from rank 0's host) and the host itself.",
        "Restart the job once the host answers again."},
       "ctxpar generate --tp-size 3 --dcp-size 3 'Hello'  # the link to rank 2's host goes down",
       "ctxpar generate --tp-size 3 --dcp-size 3 'Hello'  # after the link is back",
       {"CTXPAR-RUN-003", "CTXPAR-COMM-001", "CTXPAR-ENGINE-014"}},
      {"CTXPAR-SYS-001",
       "A thread could not be started",
       "Could start only {started} of the {count} threads asked for: {reason}; ask for fewer "
       "threads (--threads), or raise the system's limits (ulimit -u, ulimit -v).",
       kSystem,
       "ctxpar starts its worker threads once, when a model or benchmark is set up. The system "
       "refused one: each thread counts against the per-user process limit and needs memory "
       "for its stack. The threads that had started are stopped again, nothing is left running.",
       "--threads far above the machine's cores on a machine with a low `ulimit -u`, many ranks "
       "per node each with many threads, or a memory limit (`ulimit -v`, a container) that "
       "leaves no room for the stacks.",
       {"Lower --threads: more threads than hardware threads never helps.",
        "With several ranks per node, give each about cores / ranks threads (the default).",
        "Raise the limits the reason names (ulimit -u, ulimit -v) if the count is right."},
       "ctxpar generate --threads 2 'Hello'  # as a user under ulimit -u 1",
       "ctxpar generate --threads 2 'Hello'  # with ulimit -u raised",
       {"CTXPAR-FLAG-007"}},
  };
}

}  // namespace ctxpar::core_internal
