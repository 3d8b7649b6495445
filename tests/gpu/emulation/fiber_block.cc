#include "tests/gpu/emulation/fiber_block.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// switch_stack(&save_sp, load_sp): pushes the callee-saved registers, stores the stack pointer,
// loads the other one, pops its registers and returns into it.
extern "C" void gemtb_emu_switch_stack(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl gemtb_emu_switch_stack
  .type gemtb_emu_switch_stack, @function
gemtb_emu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gemtb_emu_switch_stack, .-gemtb_emu_switch_stack
)");

namespace gemtb::emu {
namespace {

constexpr size_t kStackBytes = size_t{256} << 10;
constexpr size_t kMaxExchangeBytes = 64;
constexpr int kMaxThreads = 1024;

// What a fiber waits for after it yielded at a collective.
enum class Wait { kNothing, kBarrier, kWarp };

struct Fiber {
  void* sp = nullptr;
  Dim thread;
  int64_t barriers = 0;          // block-wide barriers passed
  int64_t warp_collectives = 0;  // warp exchanges passed
  Wait wait = Wait::kNothing;
  bool done = false;
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<std::vector<unsigned char>> stacks;
  void* scheduler_sp = nullptr;
  int current = -1;
  Dim block;
  Dim block_dim;
  const std::function<void()>* body = nullptr;
  // [parity of the warp's exchange count][thread][bytes]
  unsigned char exchange[2][kMaxThreads][kMaxExchangeBytes];
};

Block& State() {
  static Block* block = new Block();
  return *block;
}

Fiber& Me() { return State().fibers[State().current]; }

void Yield() {
  Block& b = State();
  gemtb_emu_switch_stack(&b.fibers[b.current].sp, b.scheduler_sp);
}

[[noreturn]] void FiberMain() {
  Block& b = State();
  (*b.body)();
  Me().done = true;
  Yield();
  std::abort();  // a finished fiber is never resumed
}

// A fresh stack whose first switch "returns" into FiberMain with the alignment of a call.
void* InitialStack(std::vector<unsigned char>& stack) {
  uintptr_t top = reinterpret_cast<uintptr_t>(stack.data() + stack.size()) & ~uintptr_t{15};
  auto* sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                                         // FiberMain's (never used) return slot
  *--sp = reinterpret_cast<void*>(&FiberMain);             // popped by `ret`
  for (int i = 0; i < 6; ++i) *--sp = nullptr;             // rbp rbx r12 r13 r14 r15
  return sp;
}

}  // namespace

const Dim& ThreadIdx() { return Me().thread; }
const Dim& BlockIdx() { return State().block; }
const Dim& BlockDim() { return State().block_dim; }

namespace {
Dim grid_dim;
}  // namespace

void SetGridDim(Dim grid) { grid_dim = grid; }
const Dim& GridDim() { return grid_dim; }

void Barrier() {
  ++Me().barriers;
  Me().wait = Wait::kBarrier;
  Yield();
}

void WarpExchange(const void* mine, size_t bytes, void* out) {
  if (bytes > kMaxExchangeBytes) {
    std::fprintf(stderr, "emulation: WarpExchange of %zu bytes exceeds %zu\n", bytes, kMaxExchangeBytes);
    std::abort();
  }
  Fiber& me = Me();
  const int parity = static_cast<int>(me.warp_collectives & 1);
  const unsigned t = me.thread.x;
  std::memcpy(State().exchange[parity][t], mine, bytes);
  ++me.warp_collectives;
  me.wait = Wait::kWarp;
  Yield();
  const unsigned warp0 = t & ~31u;
  for (unsigned l = 0; l < 32; ++l) {
    std::memcpy(static_cast<unsigned char*>(out) + l * bytes, State().exchange[parity][warp0 + l], bytes);
  }
}

void RunBlock(Dim block, int threads, const std::function<void()>& body) {
  Block& b = State();
  if (threads > kMaxThreads || threads % 32 != 0) {
    std::fprintf(stderr, "emulation: %d threads per block unsupported\n", threads);
    std::abort();
  }
  b.block = block;
  b.block_dim = {static_cast<unsigned>(threads), 1, 1};
  b.body = &body;
  b.fibers.assign(threads, Fiber{});
  if (static_cast<int>(b.stacks.size()) < threads) b.stacks.resize(threads, std::vector<unsigned char>(kStackBytes));
  for (int i = 0; i < threads; ++i) {
    b.fibers[i].thread = {static_cast<unsigned>(i), 0, 0};
    b.fibers[i].sp = InitialStack(b.stacks[i]);
  }
  // Every runnable fiber runs to its next collective; then the warps whose lanes all wait at a warp
  // exchange pass it, and when none does, a block barrier that every unfinished fiber waits at.
  const auto fail = [&](const char* what) {
    std::fprintf(stderr, "emulation: block (%u,%u,%u): %s\n", block.x, block.y, block.z, what);
    std::abort();
  };
  for (;;) {
    bool ran = false;
    for (int i = 0; i < threads; ++i) {
      if (b.fibers[i].done || b.fibers[i].wait != Wait::kNothing) continue;
      ran = true;
      b.current = i;
      gemtb_emu_switch_stack(&b.scheduler_sp, b.fibers[i].sp);
    }
    if (ran) continue;
    bool released = false, unfinished = false;
    for (int w = 0; w < threads; w += 32) {
      int at_exchange = 0;
      for (int i = w; i < w + 32; ++i) at_exchange += b.fibers[i].wait == Wait::kWarp ? 1 : 0;
      if (at_exchange == 0) continue;
      if (at_exchange != 32) fail("a warp exchange that not every lane of the warp reaches (divergent lanes)");
      for (int i = w; i < w + 32; ++i) b.fibers[i].wait = Wait::kNothing;
      released = true;
    }
    if (released) continue;
    for (int i = 0; i < threads; ++i) {
      if (b.fibers[i].done) continue;
      unfinished = true;
      if (b.fibers[i].wait != Wait::kBarrier) fail("a fiber that neither runs nor waits");
    }
    if (!unfinished) break;
    for (Fiber& f : b.fibers) f.wait = Wait::kNothing;
  }
  b.current = -1;
  for (int i = 1; i < threads; ++i) {
    const Fiber& lead = b.fibers[i & ~31];
    if (b.fibers[i].barriers != b.fibers[0].barriers || b.fibers[i].warp_collectives != lead.warp_collectives) {
      std::fprintf(stderr,
                   "emulation: block (%u,%u,%u): thread %d passed %lld barriers and %lld warp collectives, thread 0 "
                   "%lld barriers, its warp's lane 0 %lld warp collectives: a barrier or warp collective is divergent\n",
                   block.x, block.y, block.z, i, static_cast<long long>(b.fibers[i].barriers),
                   static_cast<long long>(b.fibers[i].warp_collectives), static_cast<long long>(b.fibers[0].barriers),
                   static_cast<long long>(lead.warp_collectives));
      std::abort();
    }
  }
}

}  // namespace gemtb::emu
