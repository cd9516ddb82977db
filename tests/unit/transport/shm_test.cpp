// The shared-memory transport's parts: rings carry framed messages through wrap-around and
// messages larger than the ring; a ring is untrusted input (indices that move backwards or past
// the capacity, garbage, lies about counts and lengths are typed errors naming the peer); a
// writer whose reader stopped gives up at its deadline; segments a peer could shrink are
// refused; a SIGKILLed peer's Unix socket reads EOF at once; messages cross processes.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "common/error.h"
#include "transport/link/endpoints.h"
#include "transport/link/shm/ring_pair.h"

using namespace distrl;
using namespace distrl::transport::detail;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kCap = 4096;

Frames frames_of(std::initializer_list<std::string> parts) {
  Frames f;
  for (const auto& p : parts) f.emplace_back(p.data(), p.size());
  return f;
}

std::vector<std::string> strings_of(const Frames& f) {
  std::vector<std::string> s;
  for (const auto& m : f) s.push_back(m.to_string());
  return s;
}

// One ring in a (non-shared) segment, both ends in this process.
struct LocalRing {
  Segment seg = Segment::create("test-ring", ring_segment_bytes(kCap));
  RingWriter w;
  RingReader r;
  MessageDecoder decoder{16, 1 << 20};
  LocalRing() {
    init_ring(seg.data(), kCap);
    w = RingWriter(seg.data(), seg.size(), "the test peer");
    r = RingReader(seg.data(), seg.size(), "the test peer");
  }
  RingControl* ctl() { return r.control(); }
};

TEST(ShmRing, MessagesRoundTripThroughWrapAround) {
  LocalRing ring;
  MessageWriter mw;
  Spinner spin;
  for (int i = 0; i < 500; ++i) {  // ~100 KB through a 4 KiB ring: wraps many times
    const std::string a(static_cast<std::size_t>(i % 97), 'a'), b = "body" + std::to_string(i);
    mw.write(ring.w, frames_of({a, b, ""}), Clock::now() + 1s, spin);
    Frames out;
    ASSERT_EQ(ring.decoder.next(ring.r, out), Received::Message);
    EXPECT_EQ(strings_of(out), (std::vector<std::string>{a, b, ""}));
  }
}

TEST(ShmRing, MessageLargerThanTheRingStreamsThrough) {
  LocalRing ring;
  std::string big(1 << 18, '\0');  // 64 x the ring
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 + 7);
  std::thread writer([&] {
    MessageWriter mw;
    Spinner spin(20us);
    mw.write(ring.w, frames_of({"head", big}), Clock::now() + 10s, spin);
  });
  Frames out;
  Spinner spin(20us);
  const bool got = ring.decoder.read(ring.r, out, Clock::now() + 10s, spin);
  writer.join();
  ASSERT_TRUE(got);
  EXPECT_EQ(out.at(0).to_string(), "head");
  EXPECT_TRUE(out.at(1).to_string() == big);
}

TEST(ShmRing, WriterGivesUpAtItsDeadlineWhenTheReaderStops) {
  LocalRing ring;
  MessageWriter mw;
  Spinner spin;
  const auto t0 = Clock::now();
  EXPECT_THROW(mw.write(ring.w, frames_of({std::string(3 * kCap, 'x')}), t0 + 100ms, spin), TimeoutError);
  EXPECT_LT(Clock::now() - t0, 2s);
}

TEST(ShmRing, ReaderWaitEndsAtItsDeadline) {
  LocalRing ring;
  Frames out;
  Spinner spin(10us);
  const auto t0 = Clock::now();
  EXPECT_FALSE(ring.decoder.read(ring.r, out, t0 + 50ms, spin));
  EXPECT_GE(Clock::now() - t0, 50ms);
}

TEST(ShmRing, IndexThatMovesBackwardsIsAProtocolError) {
  LocalRing ring;
  MessageWriter mw;
  Spinner spin;
  mw.write(ring.w, frames_of({"one"}), Clock::now() + 1s, spin);
  Frames out;
  ASSERT_EQ(ring.decoder.next(ring.r, out), Received::Message);
  ring.ctl()->tail.store(2);  // behind what was read
  try {
    ring.decoder.next(ring.r, out);
    FAIL() << "no error";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("the test peer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("impossible"), std::string::npos) << e.what();
  }
}

TEST(ShmRing, IndexPastTheCapacityIsAProtocolError) {
  LocalRing ring;
  Frames out;
  ring.ctl()->tail.store(kCap + 1);
  EXPECT_THROW(ring.decoder.next(ring.r, out), ProtocolError);
  LocalRing other;  // and the writer's view of a reader that claims to have read unwritten bytes
  other.ctl()->head.store(100);
  EXPECT_THROW(other.w.writable(), ProtocolError);
}

TEST(ShmRing, ReaderIndexMovedBackwardsNeverMakesTheWriterWritePastTheRing) {
  LocalRing ring;
  const std::string block(kCap / 2, 'x');
  ring.w.put(block.data(), block.size());  // published: kCap / 2
  ring.w.publish();
  ring.ctl()->head.store(kCap / 2);  // the reader took it all
  ASSERT_EQ(ring.w.writable(), kCap);
  ring.w.put(block.data(), block.size());  // put, not yet published
  ring.ctl()->head.store(0);               // then moves its index back
  EXPECT_THROW(ring.w.put(block.data(), block.size()), ProtocolError);
}

// Raw bytes written as a misbehaving writer would: past the index checks, into the decoder.
void write_raw(LocalRing& ring, const std::vector<std::uint32_t>& words) {
  ring.w.put(words.data(), words.size() * 4);
  ring.w.publish();
}

TEST(ShmRing, GarbageAndLiesAreProtocolErrors) {
  {
    LocalRing ring;
    write_raw(ring, {0x12345678u});
    Frames out;
    EXPECT_THROW(ring.decoder.next(ring.r, out), ProtocolError);  // no frame marker
  }
  {
    LocalRing ring;  // 17 frames, the reader allows 16: read past and dropped, the next one read
    std::vector<std::uint32_t> words{kFrameMagic | 17u};
    for (int i = 0; i < 17; ++i) words.push_back(4);
    for (int i = 0; i < 17; ++i) words.push_back(0xABABABABu);
    write_raw(ring, words);
    MessageWriter mw;
    Spinner spin;
    mw.write(ring.w, frames_of({"after"}), Clock::now() + 1s, spin);
    Frames out;
    EXPECT_EQ(ring.decoder.next(ring.r, out), Received::TooManyParts);
    EXPECT_EQ(ring.decoder.dropped(), "a message of 17 frames (at most 16)");
    ASSERT_EQ(ring.decoder.next(ring.r, out), Received::Message);
    EXPECT_EQ(strings_of(out), std::vector<std::string>{"after"});
  }
  {
    LocalRing ring;  // 4 GiB claimed, 1 MiB allowed: nothing allocated, the claimed bytes skipped
    write_raw(ring, {kFrameMagic | 2u, 0x7FFFFFFFu, 0x7FFFFFFFu});
    Frames out;
    EXPECT_EQ(ring.decoder.next(ring.r, out), Received::Nothing);  // waits to read past them
    EXPECT_TRUE(ring.decoder.mid_message());
  }
  {
    LocalRing ring;  // truncated: a header promising 100 bytes, 3 written, then the writer closes
    write_raw(ring, {kFrameMagic | 1u, 100u});
    ring.w.put("abc", 3);
    ring.w.close();
    Frames out;
    Spinner spin;
    EXPECT_THROW(ring.decoder.read(ring.r, out, Clock::now() + 1s, spin), TransportError);
  }
}

TEST(ShmRing, MappingThatIsNotARingIsRefused) {
  Segment seg = Segment::create("not-a-ring", ring_segment_bytes(kCap));  // zeroes: no magic
  EXPECT_THROW(RingReader(seg.data(), seg.size(), "p"), ProtocolError);
  init_ring(seg.data(), kCap);
  static_cast<RingControl*>(seg.data())->capacity = 8192;
  EXPECT_THROW(RingWriter(seg.data(), seg.size(), "p"), ProtocolError);  // lies about its size
}

TEST(ShmSegment, RefusesDescriptorsAPeerCouldShrink) {
  const int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, 8192), 0);
  EXPECT_THROW(Segment::attach(unsealed, 8192, "a test ring"), TransportError);  // closes it
  Segment ok = Segment::create("sealed", 8192);
  EXPECT_THROW(Segment::attach(dup(ok.fd()), 4096, "a test ring"), TransportError);  // wrong size
  Segment mapped = Segment::attach(dup(ok.fd()), 8192, "a test ring");
  static_cast<char*>(ok.data())[5] = 'z';
  EXPECT_EQ(static_cast<char*>(mapped.data())[5], 'z');  // one memory, two mappings
}

std::string socket_path(const char* name) {
  return (std::filesystem::temp_directory_path() / ("distrl-test-" + std::to_string(getpid()) + "-" + name)).string();
}

TEST(ShmRingPair, CrossesProcessesAndSeesAKilledPeerAtOnce) {
  const std::string path = socket_path("pair.sock");
  UnixSocket listener = UnixSocket::listen(path);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // echo every message back, forever
    try {
      RingPair p = connect_ring_pair(path, kCap, "the parent", Clock::now() + 5s);
      MessageDecoder decoder(16, 1 << 20);
      MessageWriter mw;
      Spinner spin;
      for (;;) {
        Frames m;
        if (decoder.read(p.in, m, Clock::now() + 10s, spin)) mw.write(p.out, std::move(m), Clock::now() + 10s, spin);
      }
    } catch (...) {}
    _exit(1);
  }
  RingPair p = accept_ring_pair(listener, "the child", Clock::now() + 5s);
  MessageDecoder decoder(16, 1 << 20);
  MessageWriter mw;
  Spinner spin(20us);
  for (int i = 0; i < 200; ++i) {
    const std::string body(static_cast<std::size_t>(i * 37 % 5000), static_cast<char>('a' + i % 26));
    mw.write(p.out, frames_of({"ping", body}), Clock::now() + 5s, spin);
    Frames back;
    ASSERT_TRUE(decoder.read(p.in, back, Clock::now() + 5s, spin));
    ASSERT_EQ(strings_of(back), (std::vector<std::string>{"ping", body}));
  }
  EXPECT_FALSE(p.socket.peer_closed());
  kill(child, SIGKILL);
  const auto t0 = Clock::now();
  while (!p.socket.peer_closed() && Clock::now() - t0 < 5s) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(p.socket.peer_closed());
  EXPECT_LT(Clock::now() - t0, 1s);
  waitpid(child, nullptr, 0);
  std::filesystem::remove(path);
}

std::size_t open_fds() {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) n += e.exists() ? 1 : 0;
  return n;
}

TEST(ShmRingPair, MalformedHandshakeIsRefusedAndLeaksNothing) {
  const std::string path = socket_path("bad.sock");
  UnixSocket listener = UnixSocket::listen(path);
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);  // 0600
  const std::size_t fds_before = open_fds();
  std::thread peer([&] {
    UnixSocket s = UnixSocket::connect(path, Clock::now() + 5s);
    Segment seg = Segment::create("one", 8192);
    s.send("distrl-shm/1 4096", {seg.fd()});  // one descriptor where two belong
    std::this_thread::sleep_for(100ms);
  });
  EXPECT_THROW(accept_ring_pair(listener, "a bad peer", Clock::now() + 5s), ProtocolError);
  peer.join();
  EXPECT_EQ(open_fds(), fds_before);  // the descriptor that came with it was closed
  EXPECT_THROW(accept_ring_pair(listener, "nobody", Clock::now() + 50ms), TimeoutError);
  std::filesystem::remove(path);
}

// Issue 45, item 3: the connecting side checks who listens. A process of another uid that
// listens at a shared-memory path (one that took the path of a rank that exited) is refused on
// connect, naming its uid and pid, and gets nothing: no hello, no ring descriptor. Needs root
// (to listen as another uid).
TEST(ShmRingPair, AListenerOfAnotherUidIsRefusedBeforeAnyDescriptorIsSent) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to listen as another uid";
  const std::string dir = "/tmp/distrl-uid-test-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::all);  // the stranger may bind in it
  const std::string path = dir + "/stranger.sock";
  int ready[2], report[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(report), 0);
  const pid_t stranger = ::fork();
  if (stranger == 0) {  // uid 65534 (nobody): listens, accepts, and says how many bytes came
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    UnixSocket l = UnixSocket::listen(path);
    char c = 1;
    if (::write(ready[1], &c, 1) != 1) ::_exit(4);
    const int fd = ::accept(l.fd(), nullptr, nullptr);
    char buf[256];
    ssize_t got = 0, n = 0;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got += n;
    const long sent = static_cast<long>(got);
    if (::write(report[1], &sent, sizeof sent) != sizeof sent) ::_exit(5);
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  Hello h;
  h.capacity = 4096;
  h.kind = "io";
  try {
    open_ring_pair(path, h, -1, "rank 1", Clock::now() + 2s);
    ADD_FAILURE() << "connected to another uid's listener";
  } catch (const WrongListener& e) {
    EXPECT_NE(std::string(e.what()).find("runs as uid 65534 (pid " + std::to_string(stranger) + ")"), std::string::npos)
        << e.what();
  }
  long sent = -1;
  ASSERT_EQ(::read(report[0], &sent, sizeof sent), static_cast<ssize_t>(sizeof sent));
  EXPECT_EQ(sent, 0) << "bytes the stranger received";
  int status = 0;
  ::waitpid(stranger, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::filesystem::remove_all(dir);
}

// The sockets' directory: made 0700 for this uid; a link, another uid's directory, or one open
// to others is refused, naming it and what to do.
TEST(ShmRingPair, TheSocketDirectoryIsPrivateOrRefused) {
  const std::string base = "/tmp/distrl-dir-test-" + std::to_string(::getpid());
  std::filesystem::create_directories(base);
  const std::string dir = private_socket_dir(base);
  EXPECT_EQ(dir, base + "/distrl-u" + std::to_string(::geteuid()));
  EXPECT_EQ(std::filesystem::status(dir).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);
  EXPECT_EQ(private_socket_dir(base), dir);  // there already: fine
  std::filesystem::permissions(dir, std::filesystem::perms::all);
  try {
    private_socket_dir(base);
    ADD_FAILURE() << "a directory open to others was used";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("is open to other users (owner uid"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mode 0777"), std::string::npos) << e.what();
  }
  std::filesystem::remove(dir);
  std::filesystem::create_directory_symlink("/tmp", dir);
  EXPECT_THROW(private_socket_dir(base), TransportError);  // a link: someone else's choice of directory
  std::filesystem::remove_all(base);
}

TEST(ShmDoorbell, WakesASleeperAcrossThreads) {
  Segment seg = Segment::create("bell", 4096);
  auto* bell = new (seg.data()) Doorbell{};
  std::atomic<bool> flag{false};
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    flag.store(true, std::memory_order_release);
    bell->ring();
  });
  Spinner spin;  // no spin: the futex does it
  const auto t0 = Clock::now();
  EXPECT_TRUE(wait_on(*bell, spin, t0 + 5s, [&] { return flag.load(std::memory_order_acquire); }));
  EXPECT_LT(Clock::now() - t0, 1s);  // woken, not timed out (its slice is 50 ms; the deadline 5 s)
  t.join();
}

TEST(ShmSpinner, BacksOffWhenSpinningFailsAndProbesAgain) {
  Spinner s(std::chrono::microseconds(16));
  EXPECT_EQ(s.next(), std::chrono::microseconds(16));
  for (int i = 0; i < 10; ++i) s.slept();
  int probes = 0;
  for (int i = 0; i < 128; ++i) probes += s.next().count() > 0;
  EXPECT_EQ(probes, 2);  // every 64th wait tries the full spin again
  s.spun_ok();
  EXPECT_EQ(s.next(), std::chrono::microseconds(16));
  EXPECT_EQ(Spinner().next().count(), 0);
}

}  // namespace
