#pragma once
// SHA-256 (FIPS 180-4), for content keys (no torch here).
#include <string>

namespace trainbench {

// The digest of `data` as 64 lower-case hex digits.
std::string sha256_hex(const std::string& data);

}  // namespace trainbench
