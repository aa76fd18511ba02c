// edgekit-run generate: greedy tokens from a language-model program that keeps its KV cache inside
// (edgekit's LLM .pte: forward(tokens (1, T) int64, input_pos (T,) int64, key_pos (S,) int64) -> the last
// position's logits, (1, 1, vocab); key_pos = 0 .. S-1, the cells filled once the ids are in, sizes the
// attention; programs of older edgekits have no key_pos and return every position's logits, (1, T, vocab)).
//
// Token ids in, token ids out: the tokenizer stays with the caller (the host's edgekit, or a
// bundle's check). The prompt goes in slices of the program's planned prefill length, then one
// token per call; timing, time to first token and the peak RSS come back as one JSON document.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "errors.h"
#include "files.h"
#include "host_facts.h"
#include "json.h"
#include "manifest.h"
#include "program.h"
#include "text.h"
#include "watchdog.h"
#include "timing.h"

namespace edgekit {

namespace {

constexpr int64_t kMaxTokens = 1 << 20;

std::vector<int64_t> parse_ids(const std::string& option, const std::string& text, int64_t vocab) {
  std::vector<int64_t> ids;
  for (const auto& piece : split(text, ',')) {
    if (piece.empty()) continue;
    int64_t id = parse_int(option, piece);
    if (id < 0 || (vocab > 0 && id >= vocab)) {
      throw UsageError(format("%s: token id %lld is outside the program's vocabulary (0..%lld)", option.c_str(),
                              static_cast<long long>(id), static_cast<long long>(vocab - 1)));
    }
    ids.push_back(id);
    if (static_cast<int64_t>(ids.size()) > kMaxTokens) throw UsageError(option + ": too many token ids");
  }
  return ids;
}

Array int64_array(const std::vector<int64_t>& values, std::vector<int64_t> shape) {
  Array a;
  a.dtype = DType::Int64;
  a.shape = std::move(shape);
  a.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
  return a;
}

struct Pick {
  int64_t best = 0;
  float best_logit = 0;
  float watched_logit = 0;  // the logit of the id asked about (-1: none)
};

// The largest of `v`, NaN where one is NaN: four running maxima with no branch (the compiler keeps
// them in vector registers), where one compare-and-branch per id cost the Pi 5's core half a million
// instructions per token over a 49,152-id vocabulary.
float largest(const float* v, int64_t n) {
  float m[4] = {v[0], v[0], v[0], v[0]};
  int32_t nan[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      float x = v[i + k];
      m[k] = x > m[k] ? x : m[k];
      nan[k] |= x != x;
    }
  }
  for (; i < n; ++i) m[0] = v[i] > m[0] ? v[i] : m[0], nan[0] |= v[i] != v[i];
  if (nan[0] | nan[1] | nan[2] | nan[3]) return std::numeric_limits<float>::quiet_NaN();
  return std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
}

// The argmax of the last row of a (1, T, vocab) float32 output (T is 1 for today's programs): the first
// id of the largest logit, and the logit of `watch`.
Pick last_pick(const Array& logits, int64_t watch) {
  if (logits.shape.size() != 3 || logits.shape[0] != 1 || logits.shape[2] < 1) {
    throw RunError("the program's output is " + shape_text(logits.shape) + ", not (1, T, vocab) logits");
  }
  int64_t vocab = logits.shape[2], rows = logits.shape[1];
  if (rows < 1 || logits.data.size() != static_cast<size_t>(rows * vocab) * 4) {
    throw RunError("the program's logits have no data for their shape");
  }
  std::vector<float> row(static_cast<size_t>(vocab));
  std::memcpy(row.data(), logits.data.data() + static_cast<size_t>((rows - 1) * vocab) * 4, row.size() * 4);
  float top = largest(row.data(), vocab);
  if (top != top) throw RunError("the program's logits hold NaN");
  Pick pick;
  pick.best = std::find(row.begin(), row.end(), top) - row.begin();
  pick.best_logit = top;
  if (watch >= 0 && watch < vocab) pick.watched_logit = row[static_cast<size_t>(watch)];
  return pick;
}

}  // namespace

int generate_command(const std::vector<std::string>& argv) {
  ArgParser parser("edgekit-run generate", {"model"});
  parser.add({"--prompt-ids", true, false, {}, "ID,ID,...", "the prompt's token ids (the tokenizer's output)"});
  parser.add({"--max-new-tokens", true, false, {}, "N", "greedy tokens to generate (default 16)"});
  parser.add({"--context", true, false, {}, "N", "the program's KV-cache length: prompt + new tokens fit in it"});
  parser.add({"--stop-ids", true, false, {}, "ID,ID", "token ids that end the reply (not counted as new tokens)"});
  parser.add({"--threads", true, false, {}, "N", "XNNPACK threads (default 1)"});
  parser.add({"--expect-ids", true, false, {}, "ID,ID,...",
              "the ids the reply must begin with: a PASS: or FAIL: line after the JSON, exit 1 on FAIL"});
  parser.add({"--near-tie", true, false, {}, "LOGITS",
              "with --expect-ids: where the reply leaves them, feed the expected ids instead and accept a position "
              "whose own pick beats the expected id by at most this many logits (another CPU's rounding; default 0.25)"});
  add_timeout_option(parser, kGenerateStepLimitS);
  ParsedArgs parsed = parser.parse(argv);
  if (parsed.help) {
    emit(parser.usage());
    return kExitOk;
  }
  apply_timeout_option(parsed, kGenerateStepLimitS);
  const std::string& model = parsed.positionals[0];
  if (!parsed.has("--prompt-ids")) throw UsageError("--prompt-ids is required (the prompt's token ids)");
  if (!parsed.has("--context")) throw UsageError("--context is required (the program's KV-cache length, from its manifest)");
  int64_t threads = parsed.has("--threads") ? parse_int("--threads", parsed.last("--threads")) : 1;
  if (threads < 1 || threads > 1024) {
    throw UsageError(format("--threads must be between 1 and 1024, got %lld", static_cast<long long>(threads)));
  }
  int64_t max_new = parsed.has("--max-new-tokens") ? parse_int("--max-new-tokens", parsed.last("--max-new-tokens")) : 16;
  int64_t context = parse_int("--context", parsed.last("--context"));
  if (context < 1 || context > kMaxTokens) {
    throw UsageError(format("--context must be between 1 and %lld, got %lld", static_cast<long long>(kMaxTokens),
                            static_cast<long long>(context)));
  }
  if (max_new < 1 || max_new > context) {
    throw UsageError(format("--max-new-tokens must be between 1 and the context (%lld), got %lld",
                            static_cast<long long>(context), static_cast<long long>(max_new)));
  }
  if (!is_file(model)) throw UsageError("model file not found: " + model);
  detect_format(model, Json(), backend().format);

  const RuntimeSetup& setup = init_runtime(threads);
  Model program(model);
  const auto& inputs = program.inputs();
  const auto& outputs = program.outputs();
  auto ids_input = [&](size_t i, size_t rank) {
    return inputs[i].is_tensor() && inputs[i].known && inputs[i].dtype == DType::Int64 && inputs[i].sizes.size() == rank;
  };
  bool key_pos = inputs.size() == 3;
  bool shaped = (inputs.size() == 2 || key_pos) && ids_input(0, 2) && ids_input(1, 1) && (!key_pos || ids_input(2, 1)) &&
                !outputs.empty() && outputs[0].sizes.size() == 3;
  if (!shaped) {
    throw UsageError(basename_of(model) + " is not a language-model program with its cache inside "
                     "(forward(tokens (1, T) int64, input_pos (T,) int64[, key_pos (S,) int64]) -> logits)");
  }
  int64_t max_prefill = std::max<int64_t>(1, inputs[0].sizes[1]);
  int64_t vocab = outputs[0].sizes[2];
  std::vector<int64_t> prompt = parse_ids("--prompt-ids", parsed.last("--prompt-ids"), vocab);
  std::vector<int64_t> stops = parsed.has("--stop-ids") ? parse_ids("--stop-ids", parsed.last("--stop-ids"), vocab)
                                                       : std::vector<int64_t>{};
  std::vector<int64_t> expected = parsed.has("--expect-ids") ? parse_ids("--expect-ids", parsed.last("--expect-ids"), vocab)
                                                             : std::vector<int64_t>{};
  if (parsed.has("--expect-ids") && (expected.empty() || static_cast<int64_t>(expected.size()) > max_new)) {
    throw UsageError("--expect-ids must hold between 1 and --max-new-tokens ids");
  }
  if (prompt.empty()) throw UsageError("--prompt-ids holds no token id");
  if (static_cast<int64_t>(prompt.size()) + max_new > context) {
    throw UsageError(format("the prompt (%zu tokens) and --max-new-tokens %lld do not fit the context of %lld tokens",
                            prompt.size(), static_cast<long long>(max_new), static_cast<long long>(context)));
  }

  double near_tie = parsed.has("--near-tie") ? parse_float("--near-tie", parsed.last("--near-tie")) : 0.25;
  if (!(near_tie >= 0 && near_tie <= 100)) throw UsageError("--near-tie must be between 0 and 100 logits");

  auto pick = [&](const std::vector<int64_t>& ids, int64_t start, int64_t watch) {
    int64_t filled = start + static_cast<int64_t>(ids.size());
    std::vector<int64_t> cells(static_cast<size_t>(filled));
    for (int64_t i = 0; i < filled; ++i) cells[static_cast<size_t>(i)] = i;
    Array tokens = int64_array(ids, {1, static_cast<int64_t>(ids.size())});
    Array pos = int64_array(std::vector<int64_t>(cells.begin() + start, cells.end()), {static_cast<int64_t>(ids.size())});
    if (!key_pos) return last_pick(program.predict({&tokens, &pos}), watch);
    Array keys = int64_array(cells, {filled});
    return last_pick(program.predict({&tokens, &pos, &keys}), watch);
  };
  auto run = [&](const std::vector<int64_t>& ids, int64_t start) { return pick(ids, start, -1).best; };
  auto feed_prompt = [&](int64_t watch) {  // from position 0: what an earlier call left is overwritten, never read
    Pick last;
    for (size_t start = 0; start < prompt.size(); start += static_cast<size_t>(max_prefill)) {
      size_t stop = std::min(prompt.size(), start + static_cast<size_t>(max_prefill));
      last = pick(std::vector<int64_t>(prompt.begin() + start, prompt.begin() + stop), static_cast<int64_t>(start), watch);
    }
    return last;
  };

  int64_t t0 = now_ns();
  count_mark(CountMark::kPrefillBegin);
  int64_t next = feed_prompt(-1).best;
  count_mark(CountMark::kPrefillEnd);
  int64_t t_first = now_ns();
  std::vector<int64_t> generated;
  bool stopped = false;
  int64_t position = static_cast<int64_t>(prompt.size());
  count_mark(CountMark::kBegin);  // the decode steps: decode_calls of them (below)
  while (true) {
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
      stopped = true;
      break;
    }
    generated.push_back(next);
    if (static_cast<int64_t>(generated.size()) >= max_new) break;
    next = run({next}, position++);
  }
  count_mark(CountMark::kEnd);
  int64_t t_end = now_ns();

  double prefill_s = static_cast<double>(t_first - t0) / 1e9;
  double decode_s = static_cast<double>(t_end - t_first) / 1e9;
  int64_t decode_calls = static_cast<int64_t>(generated.size()) - 1 + (stopped ? 1 : 0);
  Json ids = Json::array();
  for (int64_t id : generated) ids.push(static_cast<long long>(id));
  Json runtime = Json::object()
                     .set("name", backend().runtime_name)
                     .set("version", runtime_version())
                     .set("threads", setup.threads > 0 ? Json(static_cast<long long>(setup.threads)) : Json());
  auto rss = peak_rss_mb();
  Json result = Json::object()
                    .set("tokens", ids)
                    .set("prompt_tokens", static_cast<long long>(prompt.size()))
                    .set("stopped", stopped)
                    .set("ttft_ms", prefill_s * 1e3)
                    .set("prefill_tokens_per_s", prefill_s > 0 ? Json(static_cast<double>(prompt.size()) / prefill_s) : Json())
                    .set("decode_tokens_per_s",
                         decode_calls > 0 && decode_s > 0 ? Json(static_cast<double>(decode_calls) / decode_s) : Json())
                    .set("peak_rss_mb", rss ? Json(*rss) : Json())
                    .set("machine", machine())
                    .set("runtime", runtime);
  if (expected.empty()) {
    if (!emit(result.dump() + "\n")) throw RunError("stdout was closed");
    return kExitOk;
  }
  size_t same = 0;
  while (same < expected.size() && same < generated.size() && generated[same] == expected[same]) ++same;
  std::string verdict;
  bool pass = same == expected.size();
  if (pass) {
    verdict = format("PASS: the first %zu greedy tokens are the expected ones\n", expected.size());
  } else {
    // The expected ids fed one by one: each position's own pick against the expected next id.
    Json positions = Json::array();
    size_t agree = 0, ties = 0;
    double worst = 0;
    int64_t at = static_cast<int64_t>(prompt.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      Pick p = i == 0 ? feed_prompt(expected[0]) : pick({expected[i - 1]}, at++, expected[i]);
      double gap = p.best == expected[i] ? 0.0 : static_cast<double>(p.best_logit) - p.watched_logit;
      if (p.best == expected[i]) {
        ++agree;
      } else {
        positions.push(Json::object().set("position", static_cast<long long>(i)).set("pick", static_cast<long long>(p.best))
                           .set("expected", static_cast<long long>(expected[i])).set("logit_gap", gap));
        if (gap <= near_tie) ++ties;
        worst = std::max(worst, gap);
      }
    }
    pass = agree + ties == expected.size();
    result.set("teacher_forced", Json::object().set("positions", static_cast<long long>(expected.size()))
                                     .set("agree", static_cast<long long>(agree)).set("near_tie", near_tie)
                                     .set("max_logit_gap", worst).set("differ", positions));
    verdict = pass ? format("PASS: greedy token %zu took the other side of a near-tie; with the expected ids fed, "
                            "%zu of %zu picks agree and the rest are within %g logits of them (largest gap %.3g)\n",
                            same, agree, expected.size(), near_tie, worst)
                   : format("FAIL: %zu of the first %zu greedy tokens are the expected ones; with the expected ids fed, "
                            "%zu of %zu picks agree and a pick beats the expected id by %.3g logits (> %g)\n",
                            same, expected.size(), agree, expected.size(), worst, near_tie);
  }
  if (!emit(result.dump() + "\n") || !emit(verdict)) throw RunError("stdout was closed");
  return pass ? kExitOk : kExitFailed;
}

}  // namespace edgekit
