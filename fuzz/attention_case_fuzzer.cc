// The attention case folder (reference/io/attention_case.h): case.json plus the .npy files it names,
// as `gemtb ref attention --case DIR` loads them.
//
// An input is a small archive: the text of case.json, then files, each introduced by a line
// "\n@@ NAME\n" (NAME of [a-z0-9_.], at most 32 characters) and running to the next marker. The
// harness writes the files to a private temporary folder and loads the case from there, so the
// fuzzer mutates the JSON and the .npy bytes together. Paths in case.json that leave the folder or
// name a file the archive does not hold are only parsed, never opened. Two more names are always
// there unless the archive writes them: "d", a folder, and "p", a fifo with no writer; naming them
// as a tensor must give a named error at once, never a block or an exception.
//
// Promises checked:
//  * ParseCaseFolderJson and LoadAttentionCase return a case or InvalidArgument (a named field),
//    never crash, whatever the JSON and the files hold.
//  * A loaded case has passed the oracle's validation, so forward cannot fail; backward cannot fail
//    when dO has O's shape and must refuse otherwise.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fuzz/byte_reader.h"
#include "reference/attention/attention.h"
#include "reference/io/attention_case.h"

namespace {

namespace fs = std::filesystem;
using gemtb::fuzz::Check;
using gemtb::fuzz::Fail;

constexpr std::string_view kMarker = "\n@@ ";
constexpr size_t kMaxFiles = 16;
constexpr char kFolderName[] = "d";
constexpr char kFifoName[] = "p";

std::string& Folder() {
  static std::string folder;
  return folder;
}

void RemoveFolder() {
  std::error_code ignored;
  fs::remove_all(Folder(), ignored);
}

bool SimpleName(std::string_view name) {
  if (name.empty() || name.size() > 32 || name == "." || name == ".." || name == "case.json") {
    return false;
  }
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.';
    if (!ok) return false;
  }
  return true;
}

struct Archive {
  std::string_view json;
  std::vector<std::pair<std::string, std::string_view>> files;
};

Archive Split(std::string_view input) {
  Archive a;
  size_t at = input.find(kMarker);
  a.json = input.substr(0, at);
  while (at != std::string_view::npos && a.files.size() < kMaxFiles) {
    const size_t name_begin = at + kMarker.size();
    const size_t name_end = input.find('\n', name_begin);
    if (name_end == std::string_view::npos) break;
    const size_t next = input.find(kMarker, name_end + 1);
    const std::string name(input.substr(name_begin, name_end - name_begin));
    const std::string_view body = input.substr(
        name_end + 1, next == std::string_view::npos ? std::string_view::npos : next - name_end - 1);
    if (SimpleName(name)) a.files.emplace_back(name, body);
    at = next;
  }
  return a;
}

// Only files inside the folder that this input wrote may be opened.
bool OnlyOurFiles(const gemtb::io::AttentionCaseSpec& s, const std::set<std::string>& written) {
  for (const std::string* p : {&s.q, &s.k, &s.v, &s.q_offsets, &s.kv_offsets, &s.kv_index,
                               &s.bias_dense, &s.bias_rel, &s.ts, &s.bias_ts, &s.rope_q, &s.rope_k,
                               &s.rope_v, &s.d_o}) {
    if (p->empty()) continue;
    const fs::path path(*p);
    if (path.parent_path() != fs::path(Folder()) || !written.count(path.filename().string())) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string tmpl = (fs::temp_directory_path() / "gemtb_fuzz_case.XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) Fail("cannot create a temporary folder");
  Folder() = tmpl;
  std::atexit(RemoveFolder);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Archive archive = Split(std::string_view(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<gemtb::io::AttentionCaseSpec> spec =
      gemtb::io::ParseCaseFolderJson(std::string(archive.json), Folder());
  if (!spec.ok()) {
    Check(absl::IsInvalidArgument(spec.status()), "case.json error is not InvalidArgument");
    return 0;
  }
  for (const auto& entry : fs::directory_iterator(Folder())) fs::remove(entry.path());
  std::set<std::string> written;
  for (const auto& [name, body] : archive.files) {
    std::ofstream(fs::path(Folder()) / name, std::ios::binary).write(body.data(), body.size());
    written.insert(name);
  }
  if (written.insert(kFolderName).second) fs::create_directory(fs::path(Folder()) / kFolderName);
  if (written.insert(kFifoName).second) ::mkfifo((fs::path(Folder()) / kFifoName).c_str(), 0600);
  if (!OnlyOurFiles(*spec, written)) return 0;

  absl::StatusOr<gemtb::io::AttentionCase> c = gemtb::io::LoadAttentionCase(*spec);
  if (!c.ok()) {
    Check(absl::IsInvalidArgument(c.status()),
          absl::StrCat("case load error is not InvalidArgument: ", c.status().ToString()));
    return 0;
  }
  gemtb::reference::ExecutionOptions exec;
  exec.threads = 1;
  absl::StatusOr<gemtb::reference::AttentionForwardResult> fwd =
      gemtb::reference::AttentionForward(c->inputs, c->options, exec);
  if (!fwd.ok()) Fail(absl::StrCat("loaded case, then forward failed: ", fwd.status().ToString()));
  if (c->has_d_o) {
    const gemtb::reference::TensorView<double> d_o{c->d_o, c->d_o_shape};
    absl::StatusOr<gemtb::reference::AttentionBackwardResult> bwd =
        gemtb::reference::AttentionBackward(c->inputs, c->options, d_o, *fwd, exec);
    if (c->d_o_shape == fwd->o_shape) {
      if (!bwd.ok()) Fail(absl::StrCat("loaded case, then backward failed: ", bwd.status().ToString()));
    } else {
      Check(!bwd.ok() && absl::IsInvalidArgument(bwd.status()),
            "backward accepted a dO whose shape is not O's");
    }
  }
  return 0;
}
