// simdjson reference benchmark (scripts/bench/simdjson.sh): the WebSocket
// benchmarks' 64 subscribe messages, one per iteration, in turn.
// Build: g++ -O3 [-march=native] -std=c++17 bench.cpp -lsimdjson -o bench
#include <simdjson.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

using namespace simdjson;
using clk = std::chrono::steady_clock;

static const char *RAW[64] = {
#include "msgs.inc"
};

static std::vector<padded_string> P;   // padded copies, prepared outside timing
static volatile uint64_t g_sink;

static inline bool check(std::string_view type, std::string_view channel) {
  return type == "subscribe" && channel.size() >= 7 && memcmp(channel.data(), "ticker.", 7) == 0;
}

// ---- variants: return 1 if message valid and matches, else 0 ----

static dom::parser dp;
static inline int v_dom(const padded_string &s) {
  dom::element e;
  if (dp.parse(s.data(), s.size(), false).get(e)) return 0;   // full validation of document
  std::string_view t, c;
  if (e["type"].get_string().get(t)) return 0;
  if (e["channel"].get_string().get(c)) return 0;
  return check(t, c);
}

static ondemand::parser op;
// On-Demand minimal: only what is needed for type/channel. Stage 1 (structural
// index + UTF-8 validation of the whole buffer) always runs over the whole input;
// fields/values not visited are NOT grammar-validated (e.g. "id" number not parsed,
// trailing content not checked).
static inline int v_od_min(const padded_string &s) {
  ondemand::document d;
  if (op.iterate(s).get(d)) return 0;
  std::string_view t, c;
  if (d["type"].get_string().get(t)) return 0;
  if (d["channel"].get_string().get(c)) return 0;
  return check(t, c);
}

// Recursively consume a value so that every token is validated.
static bool consume(ondemand::value v) {
  ondemand::json_type jt;
  if (v.type().get(jt)) return false;
  switch (jt) {
  case ondemand::json_type::object: {
    ondemand::object o; if (v.get_object().get(o)) return false;
    for (auto f : o) {
      ondemand::field fl; if (std::move(f).get(fl)) return false;
      std::string_view k; if (fl.unescaped_key().get(k)) return false;
      if (!consume(fl.value())) return false;
    }
    return true;
  }
  case ondemand::json_type::array: {
    ondemand::array a; if (v.get_array().get(a)) return false;
    for (auto x : a) { ondemand::value xv; if (x.get(xv)) return false; if (!consume(xv)) return false; }
    return true;
  }
  case ondemand::json_type::string: { std::string_view sv; return !v.get_string().get(sv); }
  case ondemand::json_type::number: { ondemand::number n; return !v.get_number().get(n); }
  case ondemand::json_type::boolean: { bool b; return !v.get_bool().get(b); }
  case ondemand::json_type::null: { bool n; return !v.is_null().get(n) && n; }
  }
  return false;
}

// On-Demand full: one pass over every field of the root object: every key is
// string-validated, every value is fully parsed (strings unescaped, numbers
// parsed via get_number, nested containers recursed), then
// doc.current_location()==OUT_OF_BOUNDS checks there is no trailing content.
// UTF-8 of the whole buffer is validated by stage 1. type/channel are captured
// during the same pass. RawKeys: "type"/"channel" are matched on the raw key
// bytes (a raw match followed by the closing quote implies the key has no
// escapes, so it is valid); otherwise, and for every other key, the key is
// unescaped with unescaped_key().
template <bool RawKeys>
static inline int v_od_full(const padded_string &s) {
  ondemand::document d;
  if (op.iterate(s).get(d)) return 0;
  ondemand::object o;
  if (d.get_object().get(o)) return 0;
  std::string_view t, c; bool ht = false, hc = false;
  for (auto f : o) {
    ondemand::field fl; if (std::move(f).get(fl)) return 0;
    int which = 0; // 1 type, 2 channel
    if (RawKeys) {
      ondemand::raw_json_string k = fl.key();
      which = k == "type" ? 1 : k == "channel" ? 2 : 0;
    }
    if (which == 0) {
      std::string_view k; if (fl.unescaped_key().get(k)) return 0;
      if (!RawKeys) which = k == "type" ? 1 : k == "channel" ? 2 : 0;
    }
    ondemand::value v = fl.value();
    if (which == 1) { if (v.get_string().get(t)) return 0; ht = true; }
    else if (which == 2) { if (v.get_string().get(c)) return 0; hc = true; }
    else if (!consume(v)) return 0;
  }
  // 3.0.1 has no public document::at_end(); current_location() returns OUT_OF_BOUNDS exactly when all tokens are consumed
  if (d.current_location().error() != OUT_OF_BOUNDS) return 0;
  return ht && hc && check(t, c);
}
static inline int v_utf8(const padded_string &s) { return simdjson::validate_utf8(s.data(), s.size()); }

static inline int v_memcmp(const padded_string &s) {
  const char *p = s.data(); const char *q = p;
  asm volatile("" : "+r"(p), "+r"(q));           // hide that p==q from the compiler
  return memcmp(p, q, s.size()) == 0;
}
static inline int v_bare(const padded_string &s) {
  const char *p = s.data(); asm volatile("" : "+r"(p)); return (int)s.size() & 1;
}

template <int (*F)(const padded_string &)>
static double run_once(uint64_t &count_out) {
  // run until >= 2 s elapsed (checking every 64K messages)
  uint64_t acc = 0, n = 0;
  auto t0 = clk::now();
  double el;
  for (;;) {
    for (uint32_t k = 0; k < 65536; k++) acc += F(P[k & 63]);
    n += 65536;
    el = std::chrono::duration<double>(clk::now() - t0).count();
    if (el >= 2.0) break;
  }
  g_sink += acc;
  count_out = n;
  if (acc != n && F != v_bare) std::fprintf(stderr, "  WARNING: acc=%llu n=%llu\n", (unsigned long long)acc, (unsigned long long)n);
  return el * 1e9 / double(n);
}

template <int (*F)(const padded_string &)>
static void bench(const char *name) {
  // warm-up
  for (int i = 0; i < 200000; i++) g_sink += F(P[i & 63]);
  std::vector<double> r; uint64_t cnt = 0, mincnt = ~0ull;
  for (int i = 0; i < 7; i++) { r.push_back(run_once<F>(cnt)); mincnt = std::min(mincnt, cnt); }
  std::vector<double> s = r; std::sort(s.begin(), s.end());
  std::printf("%-34s median %7.2f ns/msg  min %7.2f  max %7.2f  (runs:", name, s[3], s[0], s[6]);
  for (double x : r) std::printf(" %.2f", x);
  std::printf("; >=%llu msgs/run)\n", (unsigned long long)mincnt);
  std::fflush(stdout);
}

int main(int argc, char **argv) {
  size_t tot = 0;
  for (int i = 0; i < 64; i++) { P.emplace_back(std::string_view(RAW[i])); tot += P.back().size(); }
  std::printf("simdjson %s  active=%s (%s)  lib-builtin=%s  on-demand inline code compiled for=%s\n", SIMDJSON_STRINGIFY(SIMDJSON_VERSION),
              get_active_implementation()->name().c_str(),
              get_active_implementation()->description().c_str(),
              builtin_implementation()->name().c_str(), SIMDJSON_STRINGIFY(SIMDJSON_BUILTIN_IMPLEMENTATION));
  std::printf("64 messages, avg %.2f bytes\n", tot / 64.0);
  // sanity: all must be accepted by every variant; and some invalid inputs must be rejected
  for (auto &p : P) if (!v_dom(p) || !v_od_min(p) || !v_od_full<false>(p) || !v_od_full<true>(p) || !v_utf8(p)) { std::printf("sanity FAIL on %s\n", p.data()); return 1; }
  const char *bad[] = {
    R"({"type":"subscribe","channel":"ticker.x","id":12x})",
    R"({"type":"subscribe","channel":"ticker.x","id":1}})",
    R"({"type":"subscribe","channel":"ticker.x","id":01})",
    R"({"type":"subscribe","channel":"ticker.x","id":1} x)",
    "{\"type\":\"subscribe\",\"channel\":\"ticker.\xff\",\"id\":1}",
    R"({"type":"subscribe","channel":"ticker.x","id":"\q"})",
    R"({"type":"subscribe","channel":"ticker.x","i\qd":1})",
    R"({"type":"subscribe","channel":"ticker.x","id":[1,{"a":tru}]})",
  };
  for (auto b : bad) {
    padded_string ps{std::string_view(b)};
    std::printf("reject-check dom=%d od_min=%d od_full=%d od_full2=%d : %s\n", !v_dom(ps), !v_od_min(ps), !v_od_full<false>(ps), !v_od_full<true>(ps), b);
  }
  if (argc > 1 && std::string(argv[1]) == "check") return 0;
  bench<v_dom>("1 DOM parse+type+channel");
  bench<v_od_full<false>>("2a1 OnDemand full, unescape all keys");
  bench<v_od_full<true>>("2a2 OnDemand full, raw-key match");
  bench<v_od_min>("2b OnDemand type+channel only");
  bench<v_utf8>("2c validate_utf8 only");
  bench<v_memcmp>("3a memcmp(msg,msg)");
  bench<v_bare>("3b bare loop");
  return (int)(g_sink & 0);
}
