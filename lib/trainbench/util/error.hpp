#pragma once
// One error model: exceptions. The exit code a user sees is decided by the type.
#include <stdexcept>
#include <string>

namespace trainbench {

// The user's mistake in a profile or on the command line: exit 2, nothing runs.
class config_error : public std::runtime_error {
 public:
  config_error(const std::string& where, const std::string& key, const std::string& message)
      : std::runtime_error(format(where, key, message)), where_(where), key_(key), message_(message) {}
  const std::string& where() const noexcept { return where_; }
  const std::string& key() const noexcept { return key_; }
  const std::string& message() const noexcept { return message_; }

 private:
  static std::string format(const std::string& where, const std::string& key, const std::string& message) {
    std::string out = where.empty() ? std::string() : where + ": ";
    if (!key.empty()) out += "key '" + key + "': ";
    return out + message;
  }
  std::string where_;
  std::string key_;
  std::string message_;
};

// Bad input that is not a profile key (a data file, a report, a command-line value): exit 2.
class input_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The run itself failed (out of memory, a rank died, ...): exit 1, with a report that says so.
class run_error : public std::runtime_error {
 public:
  run_error(std::string kind, const std::string& message) : std::runtime_error(message), kind_(std::move(kind)) {}
  const std::string& kind() const noexcept { return kind_; }

 private:
  std::string kind_;
};

// Ctrl-C reached a point where the run stops: exit 130.
class interrupted_error : public std::runtime_error {
 public:
  interrupted_error() : std::runtime_error("interrupted by signal") {}
};

// Our own bugs: never used for validating user input, and never compiled out.
[[noreturn]] void internal_failure(const char* expr, const char* file, int line, const std::string& message);

namespace exit_code {
constexpr int ok = 0;
constexpr int failed = 1;
constexpr int bad_input = 2;
constexpr int interrupted = 130;
}  // namespace exit_code

}  // namespace trainbench

#define TB_ASSERT(expr, message)                                                       \
  do {                                                                                 \
    if (!(expr)) ::trainbench::internal_failure(#expr, __FILE__, __LINE__, (message)); \
  } while (0)
