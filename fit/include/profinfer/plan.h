#pragma once
// `profinfer plan`: for each weight MatMul of a card's decode step, the backend the fitted
// models predict fastest (CPU or Vulkan), as llama.cpp --override-tensor patterns; with
// compare, the plan measured against each single backend (docs/cli.md).
#include <string>

namespace profinfer {

struct PlanOptions {
    std::string models;          // models.json from profinfer fit
    std::string card;            // model card name or .toml
    std::string type = "q4_0";   // weight type
    int threads = 2;
    std::string compare;         // a GGUF of the card: measure the plan against each single backend
    std::string out;             // write plan.json, plan.md (and plan.csv) here; empty: print only
    int reps = 5;                // interleaved rounds of the comparison
    std::string scale;           // the card's shapes: full or tiny; empty: the scale models.json was fitted at
};

// The plan as Markdown (what `profinfer plan` prints), its files written into o.out.
std::string make_plan(const PlanOptions& o);

}  // namespace profinfer
