// A virtual board's network (scripts/vboard.sh): nothing leaves the machine. The qemu that
// runs the board has one network device, user networking with restrict=on, and forwards
// only a loopback port of this machine to the guest's sshd; from inside, neither an outside
// address nor a service listening on this machine's loopback (which unrestricted user
// networking reaches at 10.0.2.2) can be reached. Labelled vboard (a board boots).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <set>
#include <sstream>

#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer::test;

namespace {

const std::string kVboard = std::string(PROFINFER_SOURCE_DIR) + "/scripts/vboard.sh";

std::vector<std::string> cmdline_of(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
    std::vector<std::string> args;
    for (std::string a; std::getline(f, a, '\0');) args.push_back(a);
    return args;
}

// A TCP listener on this machine's loopback, on a free port.
struct Listener {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port = 0;
    Listener() {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t n = sizeof a;
        if (bind(fd, reinterpret_cast<sockaddr*>(&a), n) == 0 && listen(fd, 4) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0)
            port = ntohs(a.sin_port);
    }
    ~Listener() { close(fd); }
};

// CMD on this machine, then in the board: 0 when a TCP connection to HOST:PORT opens in 10 s.
std::string connect_cmd(const std::string& host, int port) {
    return "timeout 10 bash -c 'exec 3<>/dev/tcp/" + host + "/" + std::to_string(port) + "'";
}

}  // namespace

TEST(Vboards, NetworkReachesOnlyTheLoopbackForward) {
    const std::string name = "net-check";
    auto started = run({kVboard, "start", name, "6.1"});
    ASSERT_EQ(started.status, 0) << started.err;
    struct Stop {
        std::string name;
        ~Stop() { run({kVboard, "stop", name}); }
    } stop{name};

    // The command that runs the board.
    auto pid_of = run({kVboard, "pid", name});
    ASSERT_EQ(pid_of.status, 0) << pid_of.err;
    const pid_t pid = std::atoi(pid_of.out.c_str());
    ASSERT_GT(pid, 0) << pid_of.out;
    const auto args = cmdline_of(pid);
    ASSERT_FALSE(args.empty());
    EXPECT_NE(args[0].find("qemu-system-aarch64"), std::string::npos) << args[0];
    std::vector<std::string> netdevs;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
        EXPECT_NE(args[i], "-nic") << "a second network";
        EXPECT_NE(args[i], "-net") << "a second network";
        if (args[i] == "-netdev") netdevs.push_back(args[i + 1]);
    }
    ASSERT_EQ(netdevs.size(), 1u) << "one network device";
    std::string field;
    std::set<std::string> opts;
    for (std::istringstream f(netdevs[0]); std::getline(f, field, ',');) opts.insert(field);
    EXPECT_TRUE(opts.count("user")) << netdevs[0];
    EXPECT_TRUE(opts.count("restrict=on")) << netdevs[0];
    int forwards = 0;
    for (const auto& o : opts)
        if (o.rfind("hostfwd=", 0) == 0) {
            ++forwards;
            EXPECT_EQ(o.rfind("hostfwd=tcp:127.0.0.1:", 0), 0u) << "a forward from beyond this machine's loopback: " << o;
            EXPECT_EQ(o.substr(o.size() - 4), "-:22") << "a forward to anything but the guest's sshd: " << o;
        }
    EXPECT_EQ(forwards, 1) << netdevs[0];

    // From inside: what unrestricted user networking would reach, unreachable.
    Listener here;
    ASSERT_GT(here.port, 0);
    ASSERT_EQ(run({"bash", "-c", connect_cmd("127.0.0.1", here.port)}).status, 0) << "the listener works here";
    EXPECT_NE(run({kVboard, "ssh", name, connect_cmd("10.0.2.2", here.port)}).status, 0)
        << "the board reached a service on this machine's loopback";
    const bool outside_here = run({"bash", "-c", connect_cmd("1.1.1.1", 443)}).status == 0;
    EXPECT_NE(run({kVboard, "ssh", name, connect_cmd("1.1.1.1", 443)}).status, 0) << "the board reached 1.1.1.1:443";
    if (!outside_here) std::cout << "(this machine does not reach 1.1.1.1:443 either: that check shows less)\n";
    // And the board does answer what it should: its sshd through the forward.
    EXPECT_EQ(run({kVboard, "ssh", name, "true"}).status, 0);
}
