#pragma once
// Which switches of a profile cannot take effect on a kind of device: the rules that become
// notes in the report (`effective.notes`), and errors with --strict. Decided from the profile and
// the device kind alone, so a CPU host can check what --strict would refuse on a GPU (the test
// over every shipped profile does).
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"

namespace trainbench {

struct ineffective_switch {
  std::string key;  // "transfer.copy_stream"
  std::string why;  // "copies from pageable memory block the host until done, ..."
};

struct device_kind {
  bool cuda = false;
  std::string name = "cpu";  // as the run names its device ("cuda:0"), for the messages
  // data.decode: device: nvJPEG decodes on this device. When it cannot (no nvJPEG), the host
  // decodes and the pipeline says so as data.decode ineffective.
  bool device_decode = true;
};

std::vector<ineffective_switch> ineffective_switches(const profile& p, const device_kind& device);

// No rule above holds `key` ineffective here: what the pipeline asks before it runs a switch
// whose only effect is the one these rules judge (backend.pad_stem).
bool takes_effect(const profile& p, const device_kind& device, const std::string& key);

}  // namespace trainbench
