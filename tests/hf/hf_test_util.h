// Helpers of the Hugging Face import tests: run an interop script of tests/hf,
// rewrite a saved model directory's config.json or model.safetensors, and check
// that an import refuses it.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"
#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::runtime::hf::test {

// Runs tests/hf/`script` with `args` in the venv's Python; fails the test
// (never skips) when transformers cannot be imported or the script reports a
// mismatch. Its output goes to the test's log.
inline void run_interop(const std::string& script, const std::string& args) {
  const std::string problem = testing::python_import_problem("transformers, safetensors");
  ASSERT_TRUE(problem.empty()) << problem;
  auto r = testing::run_command(testing::python_bin() + " " +
                                    testing::source_path("tests/hf/" + script) + " " + args +
                                    " 2>&1",
                                240);
  ASSERT_EQ(r.exit_code, 0) << script << " " << args << " failed:\n" << r.output;
  std::cout << r.output;
}

// load(dir) must throw a CheckpointError whose message has every `needle`.
template <typename Load>
void expect_refused(Load load, const std::string& dir, const std::vector<std::string>& needles) {
  try {
    load(dir);
    ADD_FAILURE() << "loaded " << dir;
  } catch (const CheckpointError& e) {
    const std::string what = e.what();
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << what;
  }
}

// Rewrites `dir`'s config.json with `edit` applied.
template <typename Edit>
void edit_config(const std::string& dir, Edit edit) {
  nlohmann::json j = nlohmann::json::parse(testing::read_text_file(dir + "/config.json"));
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump();
}

// Rewrites `dir`'s model.safetensors with `edit` applied to its tensor list.
template <typename Edit>
void edit_tensors(const std::string& dir, Edit edit) {
  const std::string file = dir + "/model.safetensors";
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  {
    auto f = checkpoint::SafetensorsFile::open(file);
    for (const auto& name : f.names()) tensors.emplace_back(name, f.tensor(name).clone());
  }
  edit(tensors);
  checkpoint::write_safetensors(file, tensors, {{"format", "pt"}});
}

}  // namespace tessera::runtime::hf::test
