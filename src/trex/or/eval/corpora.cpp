#include "trex/or/eval/corpora.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/core/rng.hpp"
#include "trex/core/strings.hpp"
#include "trex/or/eval/bench.hpp"
#include "trex/or/eval/eval.hpp"
#include "trex/or/eval/runner.hpp"
#include "trex/or/eval/sandbox.hpp"
#include "trex/or/eval/scratch.hpp"

namespace trex::orlib::eval {
namespace {

using C = Category;

std::string py(const std::string& code) {
  return "```python\n" + code + "\n```\n";
}
std::string mp(const std::string& code) {
  return "```mathprog\n" + code + "\n```\n";
}
std::string lp(const std::string& code) {
  return "```lp\n" + code + "\n```\n";
}

struct Kind {
  std::string name;
  std::function<std::string(Rng&, int64_t)> make;
  std::vector<Category> expected;
};

const std::vector<Category> kAnyButCorrect = {
    C::no_code, C::extraction_failed, C::syntax_error, C::runtime_error,  C::runtime_missing,
    C::timeout, C::infeasible,        C::unbounded,    C::wrong_objective};

std::string random_bytes(Rng& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng.uniform_int(0, 255));
  return s;
}

std::string random_tokens(Rng& rng, int n) {
  static const std::vector<std::string> tokens = {
      "var", "param", "set", "s.t.",  "maximize", "minimize", "sum", "{",    "}",   "(",    ")",
      "[",   "]",     ":",   ";",     ":=",       "in",       "x",   "y",    "I",   "1..",  "<=",
      ">=",  "=",     "+",   "-",     "*",        "/",        "42",  "3.5e", "end", "data", "solve",
      "#",   "\"",    "'",   "table", "printf",   "for",      "if",  "then"};
  std::string s;
  for (int i = 0; i < n; ++i) s += rng.pick(tokens) + (rng.bernoulli(0.2) ? "\n" : " ");
  return s;
}

const char* const kGoodModel =
    "var x >= 0;\nvar y >= 0;\nmaximize z: 4 * x + 3 * y;\ns.t. a: x + y <= 12;\n"
    "s.t. b: x <= 6;\ns.t. c: y <= 9;\nsolve;\nend;\n";  // optimum 4*6 + 3*6 = 42

std::vector<Kind> make_kinds(const HostileFlags& f) {
  std::vector<Kind> k;
  // ---- Python: time
  k.push_back(
      {"py_busy_loop", [](Rng&, int64_t) { return py("while True:\n    pass"); }, {C::timeout}});
  k.push_back({"py_sleep",
               [](Rng&, int64_t) { return py("import time\ntime.sleep(10**6)"); },
               {C::timeout}});
  k.push_back({"py_ignore_signals",
               [](Rng&, int64_t) {
                 return py(
                     "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, "
                     "signal.SIGXCPU):\n    signal.signal(s, signal.SIG_IGN)\nwhile True:\n"
                     "    pass");
               },
               {C::timeout}});
  k.push_back({"py_close_stdio",
               [](Rng&, int64_t) {
                 return py("import os\nos.close(1)\nos.close(2)\nwhile True:\n    pass");
               },
               {C::timeout}});
  // ---- Python: processes
  k.push_back({"py_fork_bomb",
               [](Rng&, int64_t) {
                 return py(
                     "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                     "        pass");
               },
               {C::timeout, C::runtime_error}});
  k.push_back({"py_fork_sleepers",
               [](Rng& rng, int64_t) {
                 return py("import os, time\nfor _ in range(" +
                           std::to_string(rng.uniform_int(1, 20)) +
                           "):\n    if os.fork() == 0:\n        time.sleep(10**6)\n"
                           "print('Objective: 42')");
               },
               {C::correct, C::runtime_error}});
  k.push_back(
      {"py_setsid_escape",
       [](Rng&, int64_t) {
         return py(
             "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
             "        while True:\n            pass\n    os._exit(0)\nprint('Objective: 42')");
       },
       {C::correct}});
  k.push_back({"py_thread_bomb",
               [](Rng&, int64_t) {
                 return py(
                     "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, "
                     "args=(10**6,), daemon=True).start()");
               },
               {C::runtime_error, C::timeout}});
  k.push_back({"py_zombies",
               [](Rng& rng, int64_t) {
                 return py("import os\nfor _ in range(" + std::to_string(rng.uniform_int(5, 200)) +
                           "):\n    try:\n        if os.fork() == 0:\n            os._exit(0)\n"
                           "    except OSError:\n        pass\nprint('Objective: 42')");
               },
               {C::correct}});
  // ---- Python: memory
  k.push_back(
      {"py_alloc_bomb",
       [](Rng&, int64_t) { return py("x = []\nwhile True:\n    x.append(bytearray(10**7))"); },
       {C::runtime_error, C::timeout}});
  k.push_back({"py_alloc_huge",
               [](Rng&, int64_t) { return py("a = bytearray(10**12)"); },
               {C::runtime_error, C::timeout}});
  k.push_back({"py_touch_memory",
               [](Rng& rng, int64_t) {
                 return py("a = bytearray(" + std::to_string(rng.uniform_int(50, 1500)) +
                           " * 2**20)\nprint('Objective: 42')");
               },
               {C::correct, C::runtime_error, C::timeout}});
  k.push_back({"py_recursion",
               [](Rng&, int64_t) { return py("def f(n):\n    return f(n + 1)\nf(0)"); },
               {C::runtime_error, C::timeout}});
  // ---- Python: output
  k.push_back({"py_output_flood",
               [](Rng&, int64_t) { return py("while True:\n    print('spam ' * 200)"); },
               {C::runtime_error, C::timeout}});
  k.push_back({"py_stderr_flood",
               [](Rng&, int64_t) {
                 return py("import sys\nwhile True:\n    sys.stderr.write('e' * 4096)");
               },
               {C::runtime_error, C::timeout}});
  k.push_back({"py_huge_line",
               [](Rng&, int64_t) { return py("import sys\nsys.stdout.write('9' * 10**8)"); },
               {C::runtime_error, C::timeout}});
  k.push_back({"py_binary_garbage",
               [](Rng& rng, int64_t) {
                 return py("import os, sys\nsys.stdout.buffer.write(os.urandom(" +
                           std::to_string(rng.uniform_int(1, 200000)) +
                           "))\nsys.stdout.flush()\nprint()\nprint('Objective: 42')");
               },
               {C::correct}});
  k.push_back(
      {"py_invalid_utf8",
       [](Rng&, int64_t) {
         return py("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\xc3\\x28 objective: 42\\n')");
       },
       {C::correct}});
  k.push_back(
      {"py_unicode",
       [](Rng&, int64_t) { return py("print('\u76ee\u6807\u503c \U0001F680 objective: 42')"); },
       {C::correct}});
  // ---- Python: crashes and exits
  k.push_back({"py_segfault",
               [](Rng&, int64_t) { return py("import ctypes\nctypes.string_at(0)"); },
               {C::runtime_error}});
  k.push_back(
      {"py_abort", [](Rng&, int64_t) { return py("import os\nos.abort()"); }, {C::runtime_error}});
  k.push_back({"py_kill_self",
               [](Rng&, int64_t) { return py("import os\nos.kill(os.getpid(), 9)"); },
               {C::runtime_error}});
  k.push_back({"py_exit_code",
               [](Rng& rng, int64_t) {
                 return py("import sys\nprint('Objective: 42')\nsys.exit(" +
                           std::to_string(rng.uniform_int(1, 120)) + ")");
               },
               {C::runtime_error}});
  k.push_back({"py_os_exit",
               [](Rng&, int64_t) { return py("import os\nprint('Objective: 42')\nos._exit(0)"); },
               {C::correct}});
  k.push_back({"py_stdin",
               [](Rng&, int64_t) { return py("x = input()\nprint('Objective:', x)"); },
               {C::runtime_error}});
  k.push_back(
      {"py_probe_sabotage",
       [](Rng&, int64_t) { return py("import os\nos.write = None\nprint('Objective: 42')"); },
       {C::correct}});
  // ---- Python: files and escapes
  k.push_back(
      {"py_file_bomb",
       [](Rng&, int64_t) {
         return py(
             "with open('big.bin', 'wb') as f:\n    while True:\n        f.write(b'0' * 2**20)");
       },
       {C::runtime_error, C::timeout}});
  k.push_back(
      {"py_many_files",
       [](Rng&, int64_t) { return py("for i in range(10**6):\n    open('f%d' % i, 'w').close()"); },
       {C::runtime_error, C::timeout}});
  k.push_back(
      {"py_fd_exhaust",
       [](Rng&, int64_t) { return py("fs = []\nwhile True:\n    fs.append(open('/dev/null'))"); },
       {C::runtime_error, C::timeout}});
  k.push_back({"py_write_outside",
               [](Rng&, int64_t i) {
                 return py("open('/tmp/trex-hostile-escape-" + std::to_string(i) +
                           "', 'w').write('x')\nprint('Objective: 42')");
               },
               f.writes_confined ? std::vector<Category>{C::runtime_error}
                                 : std::vector<Category>{C::runtime_error, C::correct}});
  if (f.signals_confined) {
    k.push_back({"py_kill_parent",
                 [](Rng&, int64_t) {
                   return py("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)");
                 },
                 {C::runtime_error}});
    k.push_back({"py_kill_all",
                 [](Rng&, int64_t) { return py("import os, signal\nos.kill(-1, signal.SIGKILL)"); },
                 {C::runtime_error, C::wrong_objective}});  // Linux spares the caller itself
  }
  // ---- Python: code problems
  k.push_back(
      {"py_missing_module",
       [](Rng&, int64_t) { return py("import gurobipy_trex_missing\nprint('Objective: 42')"); },
       {C::runtime_missing}});
  k.push_back({"py_syntax_garbage",
               [](Rng& rng, int64_t) { return py("def (:\n" + random_tokens(rng, 40)); },
               {C::syntax_error}});
  k.push_back({"py_null_bytes",
               [](Rng&, int64_t) {
                 static const char code[] = "x = 1\0\nprint(x)";
                 return py(std::string(code, sizeof code - 1));
               },
               {C::syntax_error}});
  k.push_back({"py_deep_nesting",
               [](Rng& rng, int64_t) {
                 int n = static_cast<int>(rng.uniform_int(1000, 100000));
                 return py("x = " + std::string(static_cast<size_t>(n), '(') + "1" +
                           std::string(static_cast<size_t>(n), ')'));
               },
               {C::syntax_error, C::runtime_error}});
  k.push_back({"py_sleep_then_answer",
               [](Rng& rng, int64_t) {
                 return py("import time\ntime.sleep(" + format_fixed(rng.uniform(0, 0.3), 3) +
                           ")\nprint('Optimal objective: 42')");
               },
               {C::correct}});
  // ---- MathProg
  k.push_back({"mp_correct", [](Rng&, int64_t) { return mp(kGoodModel); }, {C::correct}});
  k.push_back({"mp_garbage",
               [](Rng& rng, int64_t) { return mp(random_tokens(rng, 60)); },
               {C::syntax_error}});
  k.push_back({"mp_truncated",
               [](Rng& rng, int64_t) {
                 std::string m = kGoodModel;
                 return mp(m.substr(0, rng.index(m.size())));
               },
               {C::syntax_error, C::correct, C::wrong_objective, C::unbounded, C::infeasible,
                C::extraction_failed}});
  k.push_back({"mp_huge_sum",
               [](Rng& rng, int64_t) {
                 return mp("set I := 1.." + std::to_string(rng.uniform_int(1000, 3000000)) +
                           ";\nvar x{I} >= 0, <= 1;\nmaximize z: sum{i in I} x[i];\n"
                           "s.t. c{i in I}: x[i] <= 1;\nsolve;\nend;");
               },
               {C::wrong_objective, C::timeout, C::runtime_error}});
  k.push_back({"mp_infinite_set",
               [](Rng&, int64_t) {
                 return mp(
                     "set I := 1..1e9;\nvar x{I} >= 0;\nmaximize z: sum{i in I} x[i];\n"
                     "s.t. c{i in I}: x[i] <= 1;\nend;");
               },
               {C::timeout, C::runtime_error}});
  k.push_back({"mp_deep_parens",
               [](Rng& rng, int64_t) {
                 int n = static_cast<int>(rng.uniform_int(1000, 200000));
                 return mp("var x >= 0;\nmaximize z: " + std::string(static_cast<size_t>(n), '(') +
                           "x" + std::string(static_cast<size_t>(n), ')') +
                           ";\ns.t. c: x <= 42;\nend;");
               },
               {C::correct, C::syntax_error, C::runtime_error}});
  k.push_back({"mp_printf_flood",
               [](Rng&, int64_t) {
                 return mp(
                     "var x >= 0;\nmaximize z: x;\ns.t. c: x <= 42;\nsolve;\n"
                     "printf{i in 1..100000000} \"%d\\n\", i;\nend;");
               },
               {C::correct, C::timeout, C::runtime_error}});
  k.push_back({"mp_printf_file",
               [](Rng&, int64_t) {
                 return mp(
                     "var x >= 0;\nmaximize z: x;\ns.t. c: x <= 42;\nsolve;\n"
                     "printf{i in 1..1000000000} \"xxxxxxxxxxxxxxxx\" >> \"out.txt\";\nend;");
               },
               {C::correct, C::timeout, C::runtime_error}});
  k.push_back({"mp_table_read",
               [](Rng&, int64_t) {
                 return mp(
                     "set S;\ntable t IN \"CSV\" \"/etc/passwd\": S <- [name];\nvar x >= 0;\n"
                     "maximize z: x;\ns.t. c: x <= 42;\nend;");
               },
               {C::syntax_error, C::runtime_error}});
  k.push_back(
      {"mp_infeasible",
       [](Rng&, int64_t) { return mp("var x >= 0;\nmaximize z: x;\ns.t. c: x <= -1;\nend;"); },
       {C::infeasible}});
  k.push_back(
      {"mp_unbounded",
       [](Rng&, int64_t) { return mp("var x >= 0;\nmaximize z: x;\ns.t. c: x >= 1;\nend;"); },
       {C::unbounded}});
  k.push_back(
      {"mp_hard_mip",
       [](Rng& rng, int64_t) {
         std::string m =
             "param n := 60;\nset I := 1..n;\nparam w{I};\nparam v{I};\n"
             "var x{I} binary;\nmaximize z: sum{i in I} v[i] * x[i];\n"
             "s.t. cap: sum{i in I} w[i] * x[i] <= 1000001;\n"
             "s.t. par: sum{i in I} 2 * x[i] <= 2 * 30 + 1;\ndata;\nparam w :=";
         for (int i = 1; i <= 60; ++i)
           m += " " + std::to_string(i) + " " + std::to_string(rng.uniform_int(30000, 40000));
         m += ";\nparam v :=";
         for (int i = 1; i <= 60; ++i)
           m += " " + std::to_string(i) + " " + std::to_string(rng.uniform_int(30000, 40000));
         return mp(m + ";\nend;");
       },
       {C::timeout, C::wrong_objective}});
  // ---- CPLEX LP
  k.push_back(
      {"lp_correct",
       [](Rng&, int64_t) {
         return lp(
             "Maximize\n z: 4 x + 3 y\nSubject To\n a: x + y <= 12\n b: x <= 6\n c: y <= 9\nEnd");
       },
       {C::correct}});
  k.push_back({"lp_garbage",
               [](Rng& rng, int64_t) { return lp("Maximize\n" + random_tokens(rng, 50)); },
               {C::syntax_error}});
  k.push_back({"lp_binary_junk",
               [](Rng& rng, int64_t) { return lp("Maximize\n obj: x\n" + random_bytes(rng, 300)); },
               {C::syntax_error}});
  k.push_back({"lp_huge",
               [](Rng& rng, int64_t) {
                 int n = static_cast<int>(rng.uniform_int(1000, 60000));
                 std::string s = "Maximize\n obj:";
                 for (int i = 0; i < n; ++i) s += " + x" + std::to_string(i);
                 s += "\nSubject To\n";
                 for (int i = 0; i < n; ++i)
                   s += " c" + std::to_string(i) + ": x" + std::to_string(i) + " <= 1\n";
                 return lp(s + "End");
               },
               {C::wrong_objective, C::timeout, C::runtime_error}});
  // ---- Completion text
  k.push_back({"text_empty", [](Rng&, int64_t) { return std::string(); }, {C::no_code}});
  k.push_back({"text_random_bytes",
               [](Rng& rng, int64_t) {
                 return random_bytes(rng, static_cast<size_t>(rng.uniform_int(1, 20000)));
               },
               kAnyButCorrect});
  k.push_back({"text_huge_prose",
               [](Rng& rng, int64_t) {
                 std::string s;
                 size_t n = static_cast<size_t>(rng.uniform_int(100000, 1000000));
                 while (s.size() < n) s += "The factory should balance cost and demand carefully. ";
                 return s;
               },
               {C::no_code}});
  k.push_back(
      {"text_fence_chaos",
       [](Rng& rng, int64_t) {
         static const std::vector<std::string> tags = {"json", "text", "julia", "", "bash", "yaml"};
         std::string s;
         int n = static_cast<int>(rng.uniform_int(10, 2000));
         for (int i = 0; i < n; ++i)
           s += "```" + rng.pick(tags) + "\nnote " + std::to_string(i) + ": see below\n```\n";
         return s;
       },
       {C::extraction_failed}});
  k.push_back(
      {"text_unclosed_fence",
       [](Rng&, int64_t) { return std::string("Solution:\n```python\nprint('Objective: 42')\n"); },
       {C::correct}});
  k.push_back({"text_control_chars",
               [](Rng&, int64_t) {
                 static const char text[] = "\x1b[31mred\x1b[0m \0\x07\x08 no code here";
                 return std::string(text, sizeof text - 1);
               },
               {C::no_code}});
  return k;
}

void count(std::map<std::string, std::map<std::string, int64_t>>& m, const std::string& a,
           const std::string& b) {
  m[a][b] += 1;
}

}  // namespace

const std::vector<std::string>& hostile_kinds(const HostileFlags& flags) {
  static std::map<std::pair<bool, bool>, std::vector<std::string>> cache;
  auto& names = cache[{flags.writes_confined, flags.signals_confined}];
  if (names.empty())
    for (const auto& k : make_kinds(flags)) names.push_back(k.name);
  return names;
}

std::vector<HostileCase> hostile_corpus(int64_t n, uint64_t seed, const HostileFlags& flags) {
  std::vector<Kind> kinds = make_kinds(flags);
  std::vector<HostileCase> out;
  for (int64_t i = 0; i < n; ++i) {
    const Kind& k = kinds[static_cast<size_t>(i) % kinds.size()];
    Rng rng(seed, {static_cast<uint64_t>(i)});
    HostileCase c;
    char id[32];
    std::snprintf(id, sizeof id, "h%05lld", static_cast<long long>(i));
    c.id = id;
    c.kind = k.name;
    c.completion = k.make(rng, i);
    c.expected = k.expected;
    out.push_back(std::move(c));
  }
  return out;
}

nlohmann::json run_hostile(const HostileOptions& o) {
  if (o.out_dir.empty()) throw Error("an output directory is required").field("--out");
  if (o.n < 1) throw Error("must be at least 1").field("--n");
  std::filesystem::create_directories(o.out_dir);
  HostileFlags flags;
  {
    SandboxConfig probe;
    probe.uid_base = o.sandbox_uid;
    probe.temp_root = o.temp_root;
    Sandbox s(probe);
    flags.writes_confined = s.isolation().landlock_fs;
    flags.signals_confined = s.isolation().landlock_scope || s.isolation().uid_per_slot;
  }
  std::vector<HostileCase> cases = hostile_corpus(o.n, o.seed, flags);
  const std::string bench = o.out_dir + "/hostile_bench.jsonl";
  const std::string comps = o.out_dir + "/hostile_completions.jsonl";
  {
    JsonlWriter bw(bench), cw(comps);
    for (const auto& c : cases) {
      bw.write({{"id", c.id},
                {"source", "hostile_bench"},
                {"question", "hostile case " + c.id + " (" + c.kind + ")"},
                {"answer", 42.0},
                {"answer_status", "optimal"},
                {"problem_type", c.kind}});
      cw.write({{"id", c.id}, {"completion", c.completion}});
    }
    bw.commit();
    cw.commit();
  }
  EvalOptions e;
  e.bench_paths = {bench};
  e.completions_path = comps;
  e.out_dir = o.out_dir + "/eval";
  e.jobs = o.jobs;
  e.timeout = o.timeout;
  e.memory_mb = o.memory_mb;
  e.max_processes = o.max_processes;
  e.python = o.python;
  e.sandbox_uid = o.sandbox_uid;
  e.progress = o.progress;
  e.temp_root = o.temp_root;
  const auto start = std::chrono::steady_clock::now();
  nlohmann::json report = run_eval(e);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::map<std::string, const HostileCase*> by_id;
  for (const auto& c : cases) by_id[c.id] = &c;
  std::map<std::string, std::map<std::string, int64_t>> per_kind;
  std::map<std::string, int64_t> verdicts;
  int64_t classified = 0, unexpected = 0, lines = 0;
  nlohmann::json unexpected_examples = nlohmann::json::array();
  read_jsonl(e.out_dir + "/items.jsonl", [&](const nlohmann::json& r, long) {
    ++lines;
    const std::string id = r.value("id", "");
    const std::string verdict = r.value("verdict", "");
    auto it = by_id.find(id);
    if (it == by_id.end()) return;
    bool known = false;
    Category cat = Category::no_code;
    try {
      cat = parse_category(verdict);
      known = true;
    } catch (const std::exception&) {
    }
    if (known) ++classified;
    verdicts[verdict] += 1;
    count(per_kind, it->second->kind, verdict);
    bool ok = known && std::find(it->second->expected.begin(), it->second->expected.end(), cat) !=
                           it->second->expected.end();
    if (!ok) {
      ++unexpected;
      if (unexpected_examples.size() < 30)
        unexpected_examples.push_back({{"id", id},
                                       {"kind", it->second->kind},
                                       {"verdict", verdict},
                                       {"detail", r.value("detail", "")}});
    }
  });
  // Writes that escaped the sandbox directory (none when Landlock confines writes).
  int64_t escaped = 0;
  for (const auto& c : cases) {
    if (c.kind != "py_write_outside") continue;
    const std::string path =
        "/tmp/trex-hostile-escape-" + std::to_string(std::stoll(c.id.substr(1)));
    if (std::filesystem::exists(path)) {
      ++escaped;
      std::filesystem::remove(path);
    }
  }
  nlohmann::json summary;
  summary["cases"] = cases.size();
  summary["items_written"] = lines;
  summary["classified"] = classified;
  summary["unexpected"] = unexpected;
  summary["unexpected_examples"] = unexpected_examples;
  summary["escaped_writes"] = escaped;
  summary["verdicts"] = verdicts;
  summary["per_kind"] = per_kind;
  summary["kinds"] = hostile_kinds(flags).size();
  summary["harness_peak_rss_kb"] = self_peak_rss_kb();
  summary["wall_seconds"] = seconds;
  summary["settings"] = {{"n", o.n},
                         {"seed", o.seed},
                         {"jobs", report["settings"]["jobs"]},
                         {"timeout_s", o.timeout},
                         {"memory_mb", o.memory_mb},
                         {"max_processes", o.max_processes}};
  summary["isolation"] = report["isolation"];
  summary["python"] = report["python"];
  write_file_atomic(o.out_dir + "/hostile_summary.json", summary.dump(2) + "\n");
  return summary;
}

int64_t write_gold_free_completions(const std::vector<std::string>& bench_paths,
                                    const std::string& out_path, bool with_python) {
  std::vector<Benchmark> benches = load_benchmarks(bench_paths);
  JsonlWriter w(out_path);
  int64_t k = 0;
  const int modes = with_python ? 5 : 4;
  for (const Benchmark& b : benches)
    for (const BenchItem& item : b.items) {
      std::string c;
      switch (k % modes) {
        case 0:
          c = "";
          break;
        case 1:
          c = "This problem needs a careful formulation; I would start from the constraints.";
          break;
        case 2:
          c = "```mathprog\nvar x >= 0;\nminimize z: x + " + std::to_string(k % 97) +
              ";\ns.t. c: x >= 1;\nsolve;\nend;\n```\n";
          break;
        case 3:
          c = "```lp\nMinimize\n obj: x\nSubject To\n c1: x >= 2\n c2: x <= 1\nEnd\n```\n";
          break;
        default:
          c = "```python\nprint('Optimal objective:', " + std::to_string(k % 89) + " + 0.5)\n```\n";
          break;
      }
      w.write({{"id", item.id}, {"source", b.name}, {"completion", c}});
      ++k;
    }
  w.commit();
  return k;
}

namespace {

// An n x n assignment with a planted optimum: cost 1 on a random permutation,
// 2..9 elsewhere; the optimum is n.
std::vector<std::vector<int>> planted_assignment(Rng& rng, int n) {
  std::vector<int> perm(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  rng.shuffle(perm);
  std::vector<std::vector<int>> cost(static_cast<size_t>(n),
                                     std::vector<int>(static_cast<size_t>(n)));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      cost[static_cast<size_t>(i)][static_cast<size_t>(j)] =
          perm[static_cast<size_t>(i)] == j ? 1 : rng.uniform_int(2, 9);
  return cost;
}

std::string assignment_mathprog(const std::vector<std::vector<int>>& cost) {
  const int n = static_cast<int>(cost.size());
  std::string m = "# Assign workers to jobs at minimum cost.\nparam n := " + std::to_string(n) +
                  ";\nset W := 1..n;\nset J := 1..n;\nparam c{W, J};\nvar x{W, J} binary;\n"
                  "minimize cost: sum{i in W, j in J} c[i,j] * x[i,j];\n"
                  "s.t. worker{i in W}: sum{j in J} x[i,j] = 1;\n"
                  "s.t. job{j in J}: sum{i in W} x[i,j] = 1;\nsolve;\ndata;\nparam c :";
  for (int j = 1; j <= n; ++j) m += " " + std::to_string(j);
  m += " :=\n";
  for (int i = 0; i < n; ++i) {
    m += " " + std::to_string(i + 1);
    for (int j = 0; j < n; ++j)
      m += " " + std::to_string(cost[static_cast<size_t>(i)][static_cast<size_t>(j)]);
    m += "\n";
  }
  return m + ";\nend;\n";
}

// max sum c_i x_i, x_i <= u_i, plus slack coupling rows: optimum sum c_i u_i.
std::string bounded_lp(Rng& rng, int n, double& optimum) {
  std::vector<int> c(static_cast<size_t>(n)), u(static_cast<size_t>(n));
  optimum = 0;
  for (int i = 0; i < n; ++i) {
    c[static_cast<size_t>(i)] = rng.uniform_int(1, 20);
    u[static_cast<size_t>(i)] = rng.uniform_int(1, 50);
    optimum += c[static_cast<size_t>(i)] * u[static_cast<size_t>(i)];
  }
  std::string s = "\\ bounded production plan\nMaximize\n profit:";
  for (int i = 0; i < n; ++i)
    s += " + " + std::to_string(c[static_cast<size_t>(i)]) + " x" + std::to_string(i);
  s += "\nSubject To\n";
  for (int i = 0; i < n; ++i)
    s += " cap" + std::to_string(i) + ": x" + std::to_string(i) +
         " <= " + std::to_string(u[static_cast<size_t>(i)]) + "\n";
  for (int r = 0; r < n; ++r) {
    int a = rng.uniform_int(0, n - 1), b = rng.uniform_int(0, n - 1);
    if (a == b) b = (a + 1) % n;
    s += " pair" + std::to_string(r) + ": x" + std::to_string(a) + " + x" + std::to_string(b) +
         " <= " + std::to_string(u[static_cast<size_t>(a)] + u[static_cast<size_t>(b)] + 1) + "\n";
  }
  return s + "End\n";
}

std::string assignment_python(const std::vector<std::vector<int>>& cost, bool pulp) {
  std::string rows;
  for (const auto& r : cost) {
    rows += "    [";
    for (size_t j = 0; j < r.size(); ++j) rows += (j ? ", " : "") + std::to_string(r[j]);
    rows += "],\n";
  }
  if (pulp)
    return "import pulp\n\ncost = [\n" + rows +
           "]\nn = len(cost)\nmodel = pulp.LpProblem('assignment', pulp.LpMinimize)\n"
           "x = [[pulp.LpVariable(f'x_{i}_{j}', cat='Binary') for j in range(n)] for i in "
           "range(n)]\n"
           "model += pulp.lpSum(cost[i][j] * x[i][j] for i in range(n) for j in range(n))\n"
           "for i in range(n):\n    model += pulp.lpSum(x[i][j] for j in range(n)) == 1\n"
           "for j in range(n):\n    model += pulp.lpSum(x[i][j] for i in range(n)) == 1\n"
           "model.solve()\nprint('Optimal objective:', pulp.value(model.objective))\n";
  return "import itertools\n\ncost = [\n" + rows +
         "]\nn = len(cost)\nbest = min(sum(cost[i][p[i]] for i in range(n))\n"
         "           for p in itertools.permutations(range(n)))\nprint('Optimal objective:', "
         "best)\n";
}

}  // namespace

nlohmann::json run_throughput(const ThroughputOptions& o) {
  ScratchDir dir(o.out_dir, o.temp_root);
  nlohmann::json out;
  // Is PuLP there? (decides the Python corpus)
  bool pulp = false;
  if (o.n_python > 0) {
    SandboxConfig sc;
    sc.uid_base = o.sandbox_uid;
    sc.temp_root = o.temp_root;
    Sandbox s(sc);
    RunSettings rs;
    rs.python = resolve_executable(o.python);
    if (rs.python.empty())
      throw Error("Python interpreter '" + o.python + "' not found").field("--python");
    rs.python_env = python_environment(rs.python);
    nlohmann::json info = python_preflight(s, rs);
    pulp = info["modules"].value("pulp", false);
  }
  for (const char* kind : {"mathprog", "lp", "python"}) {
    const std::string k = kind;
    const int64_t n = k == "python" ? o.n_python : o.n;
    if (n <= 0) continue;
    const std::string bench = dir.file("throughput_" + k + ".jsonl");
    const std::string comps = dir.file("throughput_" + k + ".completions.jsonl");
    {
      JsonlWriter bw(bench), cw(comps);
      for (int64_t i = 0; i < n; ++i) {
        Rng rng(o.seed, {static_cast<uint64_t>(i), k.size()});
        std::string completion;
        double optimum = 0;
        if (k == "lp") {
          completion = "```lp\n" + bounded_lp(rng, 40, optimum) + "```\n";
        } else {
          const int size = k == "python" && !pulp ? 7 : 8;
          auto cost = planted_assignment(rng, size);
          optimum = size;
          completion = k == "mathprog" ? "```mathprog\n" + assignment_mathprog(cost) + "```\n"
                                       : "```python\n" + assignment_python(cost, pulp) + "```\n";
        }
        bw.write({{"id", i}, {"answer", optimum}, {"answer_status", "optimal"}});
        cw.write({{"id", i}, {"completion", completion}});
      }
      bw.commit();
      cw.commit();
    }
    EvalOptions e;
    e.bench_paths = {bench};
    e.completions_path = comps;
    e.out_dir = dir.file("throughput_" + k);
    e.jobs = o.jobs;
    e.timeout = 60;
    e.python = o.python;
    e.sandbox_uid = o.sandbox_uid;
    e.progress = o.progress;
    e.temp_root = o.temp_root;
    const auto start = std::chrono::steady_clock::now();
    nlohmann::json report = run_eval(e);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto& b = report["benchmarks"]["throughput_" + k];
    out[k] = {{"completions", n},
              {"seconds", seconds},
              {"per_second", seconds > 0 ? static_cast<double>(n) / seconds : 0.0},
              {"pass@1", b["pass@1"]},
              {"errors", b["errors"]},
              {"jobs", report["settings"]["jobs"]}};
    if (k == "python") out[k]["library"] = pulp ? "pulp" : "none (itertools)";
  }
  out["harness_peak_rss_kb"] = self_peak_rss_kb();
  return out;
}

}  // namespace trex::orlib::eval
