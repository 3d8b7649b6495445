// gemtb: one command, subcommands below. `gemtb --help` lists them; `gemtb CMD --help` explains one.
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "model/description/data_dir.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/version.h"

namespace {

struct Subcommand {
  std::vector<std::string> words;
  int (*run)(const std::vector<std::string>&);
  const char* summary;
};

const Subcommand kSubcommands[] = {
    {{"whatif", "collective"}, gemtb::cli::RunWhatifCollective, "predicted time and busbw of one collective on a cluster"},
    {{"whatif", "calibrate"}, gemtb::cli::RunWhatifCalibrate, "fit a cluster calibration file from measured collectives"},
    {{"whatif"}, gemtb::cli::RunWhatif, "simulate a GEM-scale training job: Scaling Ratio, MFU, losses (the main job)"},
    {{"model"}, gemtb::cli::RunModel, "the GEM-like model configs: parameters, FLOPs, memory; emit model.json"},
    {{"data", "generate"}, gemtb::cli::RunDataGenerate, "synthetic planted-teacher samples as .npy"},
    {{"ref", "train"}, gemtb::cli::RunRefTrain, "train the GEM-like model on the CPU oracle (loss, NE, checkpoints)"},
    {{"golden", "verify"}, gemtb::cli::RunGoldenVerify, "recompute every golden vector and compare bit-exactly"},
    {{"golden", "regen"}, gemtb::cli::RunGoldenRegen, "rewrite the golden vectors (needs --force)"},
    {{"bench", "comm"}, gemtb::cli::RunBenchComm, "NCCL collective benchmark (nccl-tests sizes, busbw) and GEMM slowdown"},
    {{"bench", "attention"}, gemtb::cli::RunBenchAttention, "attention kernels: effective TFLOP/s on eight fixed cases"},
    {{"demo"}, gemtb::cli::RunDemo, "a short tour of the attention oracle on a random jagged batch"},
    {{"ref", "attention"}, gemtb::cli::RunRefAttention, "the jagged attention oracle on .npy tensors"},
    {{"ref", "quantize"}, gemtb::cli::RunRefQuantize, "bf16/fp16/fp8/MX quantisation, SR and RHT of a .npy tensor"},
    {{"ref", "compare"}, gemtb::cli::RunRefCompare, "check someone else's attention outputs against the oracle"},
    {{"ref", "embed"}, gemtb::cli::RunRefEmbed, "table-batched embeddings: pooling and one fused optimizer step"},
    {{"gpu", "attention"}, gemtb::cli::RunGpuAttention, "the CUDA attention kernels (H200) on .npy tensors"},
    {{"check", "attention"}, gemtb::cli::RunCheckAttention, "random cases: GPU kernels vs oracle, by the attention criteria"},
    {{"gpu", "embed"}, gemtb::cli::RunGpuEmbed, "the CUDA embedding kernels on the case folder of ref embed"},
    {{"check", "embed"}, gemtb::cli::RunCheckEmbed, "random embedding cases per family: GPU vs oracle, byte for byte"},
    {{"check", "train"}, gemtb::cli::RunCheckTrain, "the GPU trainer against the oracle's, step by step on the same batches"},
    {{"train"}, gemtb::cli::RunGpuTrain, "train the GEM-like model on one GPU (loss, samples/s, NE, checkpoints)"},
    {{"bench", "embed"}, gemtb::cli::RunBenchEmbed, "embedding kernels: effective TB/s, copy ceiling, determinism"},
    {{"bench", "layers"}, gemtb::cli::RunBenchLayers, "the trainer's layers on one GPU: per-layer MFU, Local MFU, layer calibration"},
};

void PrintCommands(std::ostream& out, const std::string& group) {
  for (const Subcommand& c : kSubcommands) {
    if (!group.empty() && (c.words.size() < 2 || c.words[0] != group)) continue;
    std::string name;
    for (size_t w = group.empty() ? 0 : 1; w < c.words.size(); ++w) name += (name.empty() ? "" : " ") + c.words[w];

    name.resize(20, ' ');
    out << "  " << name << c.summary << "\n";
  }
}

void PrintUsage(std::ostream& out) {
  out << "usage: gemtb COMMAND [flags]   (gemtb COMMAND --help for its flags; gemtb --version)\n\ncommands:\n";
  PrintCommands(out, "");
}

// A word that only starts commands ("ref", "gpu", ...): true when some command has it first and more after.
bool IsGroup(const std::string& word) {
  for (const Subcommand& c : kSubcommands)
    if (c.words.size() > 1 && c.words[0] == word) return true;
  return false;
}

std::string Name(const Subcommand& c) {
  std::string name;
  for (const std::string& w : c.words) name += (name.empty() ? "" : " ") + w;
  return name;
}

// The command boundary: whatever a command throws (an allocation larger than memory, a stream or
// filesystem error) ends as one line on stderr and exit 2, never an abort.
int RunCaught(const Subcommand& c, const std::vector<std::string>& args) {
  try {
    return c.run(args);
  } catch (const std::bad_alloc&) {
    std::cerr << "gemtb " << Name(c) << ": error: out of memory: the inputs need more memory than this machine has\n";
  } catch (const std::exception& e) {
    std::cerr << "gemtb " << Name(c) << ": error: " << gemtb::cli::OneLine(e.what()) << "\n";
  }
  return gemtb::cli::kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  // GEMTB_DATA_DIR names another data folder (a location only, README.md). It is read here: the
  // library takes the folder as an argument.
  std::optional<std::filesystem::path> data_dir;
  if (const char* env = std::getenv("GEMTB_DATA_DIR"); env != nullptr && env[0] != '\0') data_dir = env;
  gemtb::model::NameDataDir(data_dir);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    PrintUsage(std::cout);
    return args.empty() ? gemtb::cli::kExitBadInput : gemtb::cli::kExitOk;
  }
  if (args[0] == "--version") {
    std::cout << gemtb::cli::VersionText();
    return gemtb::cli::kExitOk;
  }
  for (const Subcommand& c : kSubcommands) {
    if (args.size() >= c.words.size() && std::equal(c.words.begin(), c.words.end(), args.begin())) {
      return RunCaught(c, std::vector<std::string>(args.begin() + c.words.size(), args.end()));
    }
  }
  if (IsGroup(args[0])) {
    // `gemtb ref` alone lists its subcommands as bare `gemtb` lists the commands (exit 2, a command
    // is missing); with --help, exit 0; an unknown subcommand is an error with the list on stderr.
    const bool help = args.size() > 1 && (args[1] == "--help" || args[1] == "-h");
    const bool unknown = args.size() > 1 && !help;
    if (unknown) std::cerr << "gemtb: error: unknown command '" << args[0] << " " << args[1] << "'\n";
    std::ostream& out = unknown ? std::cerr : std::cout;
    out << "usage: gemtb " << args[0] << " SUBCOMMAND [flags]   (gemtb " << args[0]
        << " SUBCOMMAND --help for its flags)\n\nsubcommands:\n";
    PrintCommands(out, args[0]);
    return help ? gemtb::cli::kExitOk : gemtb::cli::kExitBadInput;
  }
  std::cerr << "gemtb: error: unknown command '" << args[0] << (args.size() > 1 ? " " + args[1] : "")
            << "'\n";
  PrintUsage(std::cerr);
  return gemtb::cli::kExitBadInput;
}
