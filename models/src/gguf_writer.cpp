#include "profinfer/gguf_writer.h"

#include <cstring>

#include "profinfer/error.h"
#include "profinfer/ggml_types.h"

namespace profinfer::gguf {

namespace {

// The types the synthesiser writes, with llama.cpp's general.file_type for each.
constexpr std::pair<TensorType, uint32_t> kWritable[] = {
    {TensorType::F32, 0}, {TensorType::F16, 1}, {TensorType::Q4_0, 2},
    {TensorType::Q4_1, 3}, {TensorType::Q8_0, 7}, {TensorType::BF16, 32},
};

const std::vector<TypeTraits>& writable_types() {
    static const std::vector<TypeTraits> v = [] {
        std::vector<TypeTraits> out;
        for (auto [t, ftype] : kWritable) {
            const GgmlType* g = ggml_type(static_cast<uint32_t>(t));
            out.push_back({t, g->name, g->block_elems, g->block_bytes, ftype});
        }
        return out;
    }();
    return v;
}

// GGUF metadata value types.
enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };

class Bytes {
public:
    std::vector<uint8_t> buf;
    template <class T>
    void pod(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        buf.insert(buf.end(), p, p + sizeof v);
    }
    void str(const std::string& s) {
        pod<uint64_t>(s.size());
        buf.insert(buf.end(), s.begin(), s.end());
    }
    void value(const Value& v) {
        std::visit([this](const auto& x) { typed(x); }, v);
    }

private:
    void typed(uint32_t x) { pod(kU32), pod(x); }
    void typed(int32_t x) { pod(kI32), pod(x); }
    void typed(float x) { pod(kF32), pod(x); }
    void typed(bool x) { pod(kBool), pod<uint8_t>(x); }
    void typed(const std::string& x) { pod(kString), str(x); }
    void typed(const StringArray& a) {
        pod(kArray), pod(kString), pod<uint64_t>(a.size());
        for (const auto& s : a) str(s);
    }
    void typed(const F32Array& a) {
        pod(kArray), pod(kF32), pod<uint64_t>(a.size());
        for (float f : a) pod(f);
    }
    void typed(const I32Array& a) {
        pod(kArray), pod(kI32), pod<uint64_t>(a.size());
        for (int32_t i : a) pod(i);
    }
};

}  // namespace

const TypeTraits& traits(TensorType t) {
    for (const auto& tt : writable_types())
        if (tt.type == t) return tt;
    throw Error("unsupported tensor type " + std::to_string(static_cast<uint32_t>(t)));
}

TensorType parse_type(const std::string& name) {
    std::string names;
    for (const auto& tt : writable_types()) {
        if (name == tt.name) return tt.type;
        names += names.empty() ? "" : ", ", names += tt.name;
    }
    throw Error("unknown tensor type '" + name + "' (known: " + names + ")");
}

uint64_t TensorInfo::bytes() const {
    const auto& tt = traits(type);
    uint64_t n = 1;
    for (auto d : ne) n *= d;
    if (ne.empty() || ne[0] % tt.block_elems != 0)
        throw Error("tensor " + name + ": first dimension is not a multiple of the " + tt.name + " block");
    return n / tt.block_elems * tt.block_bytes;
}

void Layout::set(const std::string& key, Value v) {
    for (auto& [k, old] : kv_)
        if (k == key) {
            old = std::move(v);
            return;
        }
    kv_.emplace_back(key, std::move(v));
}

void Layout::add_tensor(const std::string& name, std::vector<uint64_t> ne, TensorType type) {
    TensorInfo t{name, std::move(ne), type, data_bytes_};
    uint64_t n = t.bytes();
    data_bytes_ += n + padding(n);
    tensors_.push_back(std::move(t));
}

std::vector<uint8_t> Layout::header() const {
    Bytes b;
    b.pod<uint32_t>(0x46554747);  // "GGUF"
    b.pod<uint32_t>(3);
    b.pod<uint64_t>(tensors_.size());
    b.pod<uint64_t>(kv_.size() + 1);
    b.str("general.alignment");
    b.value(Value(uint32_t{kAlignment}));
    for (const auto& [k, v] : kv_) b.str(k), b.value(v);
    for (const auto& t : tensors_) {
        b.str(t.name);
        b.pod<uint32_t>(t.ne.size());
        for (auto d : t.ne) b.pod<uint64_t>(d);
        b.pod<uint32_t>(static_cast<uint32_t>(t.type));
        b.pod<uint64_t>(t.offset);
    }
    b.buf.resize(b.buf.size() + padding(b.buf.size()), 0);
    return b.buf;
}

}  // namespace profinfer::gguf
