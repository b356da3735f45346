#include "trainbench/util/error.hpp"

namespace trainbench {

void internal_failure(const char* expr, const char* file, int line, const std::string& message) {
  throw std::logic_error(std::string("internal error: ") + expr + " failed at " + file + ":" + std::to_string(line) +
                         ": " + message);
}

}  // namespace trainbench
