// llama.cpp's side of bench/cpu_side_by_side.py: the same label reads decide makes, through
// llama.cpp's C API, timed around llama_decode.
//
//   llama_reads tokenize MODEL < records      token ids of each text (parse_special, no BOS)
//   llama_reads run MODEL PLAN THREADS         times every request of PLAN in each mode
//                                              (and one 512-token prompt: mode pp512)
//
// `tokenize` reads records `<byte count>\n<bytes>` from stdin and prints one line of
// space-separated token ids per record.
//
// PLAN is plain text, one request after another:
//   R <name> <prompt count>
//   P <label count> <label ids...> <token count> <token ids...>     (one line per prompt)
// `run` prints one JSON object per line, per mode and request:
//   {"mode": M, "request": NAME, "ms": wall ms of the decodes, "decoded": tokens decoded,
//    "logprobs": [[label log-probabilities of each prompt]]}
// Modes:
//   alone    each prompt by itself: memory cleared, the whole prompt decoded, the logits of
//            its last position only (what a plain llama.cpp user does, one prompt at a time);
//   shared   the request's longest common prefix decoded once (sequence 0), then each
//            suffix decoded from a copy of it (llama_memory_seq_cp to sequence 1, then
//            llama_memory_seq_rm), one after another;
//   batched  the common prefix once, then every suffix in one llama_decode, each on its own
//            copied sequence (llama.cpp's best case for the same reads on one context).
// Label log-probabilities are a log-softmax over the whole vocabulary at the last position.
#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

struct Prompt {
    std::vector<llama_token> labels, tokens;
};
struct Request {
    std::string name;
    std::vector<Prompt> prompts;
};

static const int N_BATCH = 2048;
static const int N_SEQ = 32;

static void die(const char *what) {
    fprintf(stderr, "llama_reads: %s\n", what);
    exit(1);
}

static double now_ms() {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static void quiet(enum ggml_log_level level, const char *text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

// Decodes tokens[from..) of one sequence at positions from.., in chunks of N_BATCH; the
// logits of the last token only. Returns the batch row of that token in the last chunk.
static int decode_seq(llama_context *ctx, llama_batch &batch, const std::vector<llama_token> &tokens,
                      size_t from, llama_seq_id seq, bool want_logits) {
    int last_row = -1;
    for (size_t start = from; start < tokens.size(); start += N_BATCH) {
        size_t end = std::min(tokens.size(), start + N_BATCH);
        batch.n_tokens = 0;
        for (size_t i = start; i < end; i++) {
            int r = batch.n_tokens++;
            batch.token[r] = tokens[i];
            batch.pos[r] = (llama_pos)i;
            batch.n_seq_id[r] = 1;
            batch.seq_id[r][0] = seq;
            batch.logits[r] = want_logits && i + 1 == tokens.size();
            if (batch.logits[r]) last_row = r;
        }
        if (llama_decode(ctx, batch) != 0) die("llama_decode failed");
    }
    return last_row;
}

static std::vector<double> label_logprobs(llama_context *ctx, int row, int n_vocab,
                                          const std::vector<llama_token> &labels) {
    const float *logits = llama_get_logits_ith(ctx, row);
    double mx = -INFINITY;
    for (int i = 0; i < n_vocab; i++) mx = std::max(mx, (double)logits[i]);
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += std::exp((double)logits[i] - mx);
    double lse = mx + std::log(sum);
    std::vector<double> out;
    for (auto l : labels) out.push_back((double)logits[l] - lse);
    return out;
}

static size_t common_prefix(const std::vector<Prompt> &ps) {
    size_t n = ps[0].tokens.size() - 1;  // at least the last token of each prompt stays a suffix
    for (auto &p : ps) {
        size_t k = 0, lim = std::min(n, p.tokens.size() - 1);
        while (k < lim && p.tokens[k] == ps[0].tokens[k]) k++;
        n = k;
    }
    return n;
}

static void emit(const char *mode, const Request &rq, double ms, long decoded,
                 const std::vector<std::vector<double>> &lps) {
    std::ostringstream o;
    o.precision(6);
    o << "{\"mode\": \"" << mode << "\", \"request\": \"" << rq.name << "\", \"ms\": " << ms
      << ", \"decoded\": " << decoded << ", \"logprobs\": [";
    for (size_t i = 0; i < lps.size(); i++) {
        o << (i ? ", [" : "[");
        for (size_t j = 0; j < lps[i].size(); j++) o << (j ? ", " : "") << lps[i][j];
        o << "]";
    }
    o << "]}";
    printf("%s\n", o.str().c_str());
    fflush(stdout);
}

static std::vector<Request> read_plan(const char *path) {
    std::ifstream in(path);
    if (!in) die("cannot open the plan");
    std::vector<Request> out;
    std::string tag;
    while (in >> tag) {
        if (tag == "R") {
            Request r;
            size_t n;
            in >> r.name >> n;
            for (size_t i = 0; i < n; i++) {
                Prompt p;
                size_t k;
                in >> tag >> k;
                if (tag != "P") die("bad plan: P expected");
                p.labels.resize(k);
                for (auto &l : p.labels) in >> l;
                in >> k;
                p.tokens.resize(k);
                for (auto &t : p.tokens) in >> t;
                r.prompts.push_back(std::move(p));
            }
            out.push_back(std::move(r));
        } else {
            die("bad plan: R expected");
        }
    }
    return out;
}

int main(int argc, char **argv) {
    if (argc < 3) die("usage: llama_reads tokenize MODEL | run MODEL PLAN THREADS");
    std::string cmd = argv[1];
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.progress_callback = [](float, void *) { return true; };
    // ggml's extra CPU buffer types are off unless LLAMA_READS_EXTRA_BUFTS=1: on this release
    // (b10359) with a native build on an AMX CPU (Sapphire Rapids), the AMX one crashes in
    // ggml_backend_amx_mul_mat (llama-bench dies the same way) and, with AMX refused, the
    // repacked Q4_K kernels return wrong logits for some batch sizes (a 46-token suffix read
    // all-equal logits); the plain AVX-512 kernels agree with decide.
    mp.use_extra_bufts = getenv("LLAMA_READS_EXTRA_BUFTS") != nullptr;
    llama_model *model = llama_model_load_from_file(argv[2], mp);
    if (!model) die("cannot load the model");
    const llama_vocab *vocab = llama_model_get_vocab(model);

    if (cmd == "tokenize") {
        std::string line;
        while (std::getline(std::cin, line)) {
            if (line.empty()) continue;
            size_t n = std::stoul(line);
            std::string text(n, '\0');
            std::cin.read(&text[0], n);
            std::vector<llama_token> ids(n + 16);
            int k = llama_tokenize(vocab, text.data(), (int)n, ids.data(), (int)ids.size(), false, true);
            if (k < 0) die("llama_tokenize failed");
            for (int i = 0; i < k; i++) printf(i ? " %d" : "%d", ids[i]);
            printf("\n");
        }
        return 0;
    }
    if (cmd != "run" || argc < 5) die("usage: llama_reads run MODEL PLAN THREADS");
    std::vector<Request> plan = read_plan(argv[3]);
    int threads = atoi(argv[4]);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 8192;
    cp.n_batch = N_BATCH;
    cp.n_seq_max = N_SEQ;
    cp.kv_unified = true;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) die("cannot create the context");
    llama_memory_t mem = llama_get_memory(ctx);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    llama_batch batch = llama_batch_init(N_BATCH, 0, 1);
    fprintf(stderr, "llama_reads: %s\n", llama_print_system_info());

    // Warm-up: the first decode allocates the compute buffers.
    if (!plan.empty()) {
        llama_memory_clear(mem, false);
        decode_seq(ctx, batch, plan[0].prompts[0].tokens, 0, 0, true);
    }
    // Prompt processing: one 512-token prompt (the first prompt's tokens repeated), decoded
    // alone, as llama-bench's pp512 does.
    if (!plan.empty()) {
        std::vector<llama_token> pp;
        while (pp.size() < 512) for (auto t : plan[0].prompts[0].tokens) if (pp.size() < 512) pp.push_back(t);
        llama_memory_clear(mem, false);
        double s = now_ms();
        decode_seq(ctx, batch, pp, 0, 0, true);
        double ms = now_ms() - s;
        printf("{\"mode\": \"pp512\", \"request\": \"pp512\", \"ms\": %.1f, \"decoded\": 512, \"logprobs\": []}\n", ms);
    }
    for (const auto &rq : plan) {
        // alone
        {
            std::vector<std::vector<double>> lps;
            long decoded = 0;
            double t0 = now_ms(), spent = 0;
            for (const auto &p : rq.prompts) {
                llama_memory_clear(mem, false);
                double s = now_ms();
                int row = decode_seq(ctx, batch, p.tokens, 0, 0, true);
                spent += now_ms() - s;
                decoded += p.tokens.size();
                lps.push_back(label_logprobs(ctx, row, n_vocab, p.labels));
            }
            (void)t0;
            emit("alone", rq, spent, decoded, lps);
        }
        size_t prefix = common_prefix(rq.prompts);
        std::vector<llama_token> head(rq.prompts[0].tokens.begin(), rq.prompts[0].tokens.begin() + prefix);
        // shared
        {
            std::vector<std::vector<double>> lps;
            llama_memory_clear(mem, false);
            double s = now_ms();
            if (prefix) decode_seq(ctx, batch, head, 0, 0, false);
            long decoded = prefix;
            for (const auto &p : rq.prompts) {
                llama_memory_seq_cp(mem, 0, 1, -1, -1);
                int row = decode_seq(ctx, batch, p.tokens, prefix, 1, true);
                decoded += p.tokens.size() - prefix;
                lps.push_back(label_logprobs(ctx, row, n_vocab, p.labels));
                llama_memory_seq_rm(mem, 1, -1, -1);
            }
            emit("shared", rq, now_ms() - s, decoded, lps);
        }
        // batched
        if (rq.prompts.size() < (size_t)N_SEQ) {
            std::vector<std::vector<double>> lps;
            llama_memory_clear(mem, false);
            double s = now_ms();
            if (prefix) decode_seq(ctx, batch, head, 0, 0, false);
            long decoded = prefix;
            size_t total = 0;
            for (const auto &p : rq.prompts) total += p.tokens.size() - prefix;
            llama_batch many = llama_batch_init((int)total, 0, 1);
            std::vector<int> rows;
            for (size_t i = 0; i < rq.prompts.size(); i++) {
                const auto &p = rq.prompts[i];
                llama_seq_id seq = (llama_seq_id)(i + 1);
                llama_memory_seq_cp(mem, 0, seq, -1, -1);
                for (size_t t = prefix; t < p.tokens.size(); t++) {
                    int r = many.n_tokens++;
                    many.token[r] = p.tokens[t];
                    many.pos[r] = (llama_pos)t;
                    many.n_seq_id[r] = 1;
                    many.seq_id[r][0] = seq;
                    many.logits[r] = t + 1 == p.tokens.size();
                }
                rows.push_back(many.n_tokens - 1);
                decoded += p.tokens.size() - prefix;
            }
            if (total > (size_t)N_BATCH) die("suffixes over one batch");
            if (llama_decode(ctx, many) != 0) die("llama_decode failed");
            for (size_t i = 0; i < rq.prompts.size(); i++)
                lps.push_back(label_logprobs(ctx, rows[i], n_vocab, rq.prompts[i].labels));
            double ms = now_ms() - s;
            llama_batch_free(many);
            emit("batched", rq, ms, decoded, lps);
        }
    }
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
