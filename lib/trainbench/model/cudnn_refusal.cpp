#include "trainbench/model/cudnn_refusal.hpp"

#include <cctype>
#include <cstddef>
#include <string_view>

namespace trainbench {
namespace {

struct named_status {
  std::string_view name;
  int code;
};

// The statuses that decline, by the names cudnnGetErrorString gives them (cuDNN 9).
constexpr named_status declining[] = {
    {"CUDNN_STATUS_BAD_PARAM", 2000},
    {"CUDNN_STATUS_NOT_SUPPORTED", 3000},
    {"CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN", 3001},
    {"CUDNN_STATUS_NOT_SUPPORTED_SHAPE", 3002},
    {"CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE", 3003},
    {"CUDNN_STATUS_NOT_SUPPORTED_LAYOUT", 3004},
    {"CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT", 3010},
    {"CUDNN_STATUS_NOT_SUPPORTED_PADDING", 3011},
    {"CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM", 3012},
};

bool name_char(char c) { return std::isupper(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

bool cudnn_status_declines(int code) {
  for (const named_status& s : declining)
    if (s.code == code) return true;
  return false;
}

cudnn_status_names judge_cudnn_status_names(const std::string& message) {
  constexpr std::string_view prefix = "CUDNN_STATUS_";
  bool named = false;
  for (std::size_t at = message.find(prefix); at != std::string::npos; at = message.find(prefix, at + 1)) {
    if (at > 0 && name_char(message[at - 1])) continue;  // inside a longer word
    std::size_t end = at + prefix.size();
    while (end < message.size() && name_char(message[end])) ++end;
    const std::string_view name(message.data() + at, end - at);
    if (name == "CUDNN_STATUS_SUCCESS") continue;
    named = true;
    bool declines = false;
    for (const named_status& s : declining) declines = declines || s.name == name;
    if (!declines) return cudnn_status_names::failure;
  }
  return named ? cudnn_status_names::decline : cudnn_status_names::none;
}

}  // namespace trainbench
