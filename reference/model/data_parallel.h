// Data parallelism of the CPU trainer over processes, bit for bit the single-process trainer.
//
// Every rank holds the whole model and tables, generates the whole batch and looks it up, but runs
// the model forward and backward only on its share of the gradient blocks (batch_pass.h): rank r of
// R takes blocks [r*G/R, (r+1)*G/R) of the G = grad_blocks blocks, so R must divide G (and G <= B,
// so that every block holds a sample). The parts are then combined in the single process's order:
//   parameter gradient  the block-order sum ((g_0 + g_1) + g_2) + ..., carried from rank to rank
//                       (ChainSum), each adding its blocks in order: the same fp32 additions as one
//                       process makes;
//   per-sample parts    loss terms, logits and the embedding input gradients, all-gathered in rank
//                       order, which is sample order; the loss is summed in fp64 in sample order.
// Every rank then applies the same Adam and rowwise-Adagrad updates to the same gradients, so the
// state stays identical on every rank and equal to the single-process run's.
#ifndef GEMTB_REFERENCE_MODEL_DATA_PARALLEL_H_
#define GEMTB_REFERENCE_MODEL_DATA_PARALLEL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/description/model_config.h"
#include "model/data/batch.h"
#include "reference/model/batch_pass.h"

namespace gemtb::reference::model {

// The collectives a data-parallel step needs; every rank calls them in the same order. Payloads are
// raw fp32 bytes in host order (all ranks run one ISA, as the oracle's bit-exactness assumes).
class DataParallelGroup {
 public:
  virtual ~DataParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Every rank's bytes, in rank order.
  virtual absl::StatusOr<std::vector<std::string>> AllGather(const std::string& bytes) = 0;
  // The block-order sum of every rank's blocks (rank 0's first block as is, then each block added
  // element by element in fp32, rank after rank); the same result on every rank.
  virtual absl::StatusOr<std::vector<float>> ChainSum(const std::vector<std::vector<float>>& blocks) = 0;
};

// Rank `rank`'s blocks [begin, end) of `grad_blocks`, after CheckDataParallel.
std::pair<int, int> RankBlocks(int grad_blocks, int rank, int world_size);

// InvalidArgument naming the values when R does not divide grad_blocks or grad_blocks > batch.
absl::Status CheckDataParallel(int grad_blocks, int64_t batch, int world_size);

// Completes this rank's ranged batch pass `r` (RankBlocks) into the whole batch's: param_grad, loss,
// logits and input_grads of every sample, as the single process computes them.
absl::Status CombineDataParallel(const gemtb::model::ModelConfig& config, const data::Batch& batch, int grad_blocks,
                                 DataParallelGroup& group, BatchPassResult<float>& r);

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_DATA_PARALLEL_H_
