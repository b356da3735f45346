// The replacement of the global operator new and delete that tests/alloc_count.hpp counts with:
// malloc and free, as the default ones, plus a per-thread counter while a thread_allocations is
// alive on that thread. Every non-aligned form is replaced, so that each pair stays matched (a
// sanitizer's own nothrow new freed by our delete would be a mismatch); the aligned forms are
// left alone, and so is memory taken with malloc or posix_memalign directly (LibTorch's CPU
// allocator): neither is counted.
#include "alloc_count.hpp"

#include <cstdlib>
#include <new>

namespace {
// Plain thread-locals, with no constructor: usable from any allocation, even at thread start.
thread_local bool counting = false;
thread_local std::int64_t allocations = 0;

void* allocate(std::size_t size) {
  if (counting) ++allocations;
  if (size == 0) size = 1;
  while (true) {
    if (void* p = std::malloc(size)) return p;
    std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
  }
}

void* allocate_nothrow(std::size_t size) noexcept {
  try {
    return allocate(size);
  } catch (...) {
    return nullptr;
  }
}
}  // namespace

void* operator new(std::size_t size) { return allocate(size); }
void* operator new[](std::size_t size) { return allocate(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return allocate_nothrow(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return allocate_nothrow(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace tbtest {

thread_allocations::thread_allocations() : start_(allocations), outer_(!counting) { counting = true; }

thread_allocations::~thread_allocations() {
  if (outer_) counting = false;
}

std::int64_t thread_allocations::count() const { return allocations - start_; }

}  // namespace tbtest
