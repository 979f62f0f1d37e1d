#pragma once
// A run's study metrics read from its trace, each defined once here (docs/experiments.md
// lists them with the paper's figure each stands for): decode_tps and decode_calls,
// prefill_tps, prefill_mul_mat_share_pct, op_ms_per_token, attention_step_ratio, attention_in_block_ratio, mul_mat_share_pct, attention_share_pct, wait_share_pct,
// preempted_per_token, decode_tps_{before,during,after}_hog, attention_growth_ratio,
// weight_matmul_growth_ratio, gpu_graph_share_pct, weight_stream_gbs, attn_block_ops,
// ffn_block_ops, kq_over_weight_ratio, moe_ms_per_token, moe_first_call_ms,
// moe_major_faults_per_token, moe_first_call_major_faults, moe_reuse_time_r,
// wait_share_matmul_pct, wait_share_other_pct, wait_share_activation_pct. A metric the trace
// cannot give (no operator records, no hog, no MoE, one thread) is null.
#include <nlohmann/json.hpp>

#include "profinfer/store.h"

namespace profinfer {

nlohmann::json trace_metrics(store::Database& db);

}  // namespace profinfer
