#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace profinfer::gguf {

// ggml tensor types the synthesiser can write (values are ggml's enum ggml_type).
enum class TensorType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, BF16 = 30 };

struct TypeTraits {
    TensorType type;
    const char* name;
    uint32_t block_elems;  // elements per block
    uint32_t block_bytes;  // bytes per block
    uint32_t llama_ftype;  // general.file_type of a model whose matrices have this type
};
// Block geometry from profinfer::ggml_type, plus the file type llama.cpp expects.
const TypeTraits& traits(TensorType t);
// "f16", "q4_0", ...; throws profinfer::Error listing the accepted names.
TensorType parse_type(const std::string& name);

struct TensorInfo {
    std::string name;
    std::vector<uint64_t> ne;  // ggml order: ne[0] is the contiguous dimension
    TensorType type;
    uint64_t offset = 0;  // from the start of the data section
    uint64_t bytes() const;
};

using StringArray = std::vector<std::string>;
using F32Array = std::vector<float>;
using I32Array = std::vector<int32_t>;
using Value = std::variant<uint32_t, int32_t, float, bool, std::string, StringArray, F32Array, I32Array>;

// A GGUF v3 file laid out in memory except for the tensor data, which the caller
// streams after header() in the order of tensors(), each padded to alignment().
class Layout {
public:
    static constexpr uint32_t kAlignment = 32;

    void set(const std::string& key, Value v);
    void add_tensor(const std::string& name, std::vector<uint64_t> ne, TensorType type);

    std::vector<uint8_t> header() const;  // everything before the first tensor's data, padded
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    uint64_t data_bytes() const { return data_bytes_; }  // padded data section size
    static uint64_t padding(uint64_t n) { return (kAlignment - n % kAlignment) % kAlignment; }

private:
    std::vector<std::pair<std::string, Value>> kv_;
    std::vector<TensorInfo> tensors_;
    uint64_t data_bytes_ = 0;
};

}  // namespace profinfer::gguf
