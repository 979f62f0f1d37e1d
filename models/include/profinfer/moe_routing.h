#pragma once
// How a synthetic MoE model routes its tokens to experts (paper Fig. 13).
//
// Random weights give a router whose hidden state forgets the token after the first layer:
// every later layer picks the same few experts call after call, and reuse distance cannot
// vary. With `zipf:S` the synthesiser instead builds the router so that each token's experts
// are chosen ahead, per layer, with a Zipf popularity of exponent S over the experts:
// a step's top-k holds the expert of popularity rank r with probability pi[r]
// (inclusion_probabilities), independently of the previous steps when the tokens are.
//
// How it is built (synth.cpp): each layer reads its own block of `experts` dimensions of the
// hidden state (layers share blocks when hidden < layers x experts); the router of layer l
// is the identity on its block; a token's embedding row holds a large value A on the
// dimensions of its chosen experts in every block and 0 elsewhere, so the residual stream
// keeps the token's choice through every layer (the layers add O(1) to an A of 1024).
// Tokens' choices are stratified systematic samples, so over the vocabulary the share of
// tokens choosing rank r equals pi[r] to within 1/vocab.
#include <cstdint>
#include <string>
#include <vector>

namespace profinfer {

struct MoeRouting {
    enum class Kind { Random, Zipf };
    Kind kind = Kind::Zipf;
    double s = 1.0;  // Zipf exponent: popularity of rank r (1-based) proportional to r^-s; 0 = uniform

    // "random" (the random router of random weights) or "zipf:S" (S >= 0; "uniform" = zipf:0).
    static MoeRouting parse(const std::string& text);
    std::string str() const;
};

// Per popularity rank (0 = most popular), the probability that one step's top-`used` set
// holds that expert: used x the Zipf weight, capped at 1 with the rest shared out again
// (they sum to `used`).
std::vector<double> inclusion_probabilities(uint32_t experts, uint32_t used, double s);

// Expected number of reuse pairs at each distance d = 1 .. max_d (index d - 1; the last
// entry counts every d >= max_d) among `steps` consecutive iid steps in which an expert is
// used with probability pi[e]: sum over e of (steps - d) pi^2 (1 - pi)^(d - 1).
std::vector<double> expected_reuse_distances(const std::vector<double>& pi, int steps, int max_d);

}  // namespace profinfer
