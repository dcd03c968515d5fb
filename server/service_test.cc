// The gRPC service with a real server on a loopback port: bad input from a
// client gets a precise errno (or UNAUTHENTICATED), never a crash.
#include "server/service.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <cerrno>
#include <filesystem>

#include "common/pki.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "server/service_endpoint.h"
#include "server/service_test_util.h"

namespace grantfs {
namespace {

TEST_F(ServiceTest, WrongOrMissingSecretIsUnauthenticated) {
  proto::StatusRequest req;
  proto::StatusReply reply;
  EXPECT_EQ(stub_->Status(Ctx("wrong").get(), req, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stub_->Status(Ctx("").get(), req, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(stub_->Status(Ctx().get(), req, &reply).ok());
  EXPECT_EQ(reply.role(), "standalone");
}

// The service over TLS: a server certificate of a test CA, and stubs with
// certificates of any kind and options from the same CA.
class ServiceTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    volume_ = OpenTestVolume(&dir_);
    ASSERT_OK_AND_ASSIGN(ca_, MakeCertificateAuthority("test CA", from_, to_));
    ServiceOptions so;
    so.transport = TransportOf("server:a");
    service_ = std::make_unique<GrantFsService>(volume_.get(), so);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", so.transport.ServerCredentials(), &port_);
    endpoint_ = std::make_unique<GrantFsEndpoint>(service_.get(), RequestQueueOptions());
    b.RegisterService(endpoint_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    server_->Shutdown();
    volume_.reset();
    std::filesystem::remove_all(dir_);
  }
  Transport TransportOf(const std::string& cn, const std::string& options = "") {
    absl::StatusOr<CertAndKey> c = IssueCertificate(ca_, cn, from_, to_, options);
    EXPECT_TRUE(c.ok()) << c.status();
    absl::StatusOr<Transport> t = Transport::FromPem(ca_.cert_pem, c->cert_pem, c->key_pem, "");
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
  std::unique_ptr<proto::GrantFs::Stub> Stub(const Transport& t) {
    return proto::GrantFs::NewStub(
        t.Connect("127.0.0.1:" + std::to_string(port_), grpc::ChannelArguments()));
  }
  std::unique_ptr<proto::GrantFs::Stub> Stub(const std::string& cn,
                                             const std::string& options = "") {
    return Stub(TransportOf(cn, options));
  }
  static std::unique_ptr<grpc::ClientContext> Ctx() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  }

  const absl::Time from_ = absl::Now() - absl::Hours(1), to_ = absl::Now() + absl::Hours(1);
  std::string dir_;
  std::unique_ptr<Volume> volume_;
  CertAndKey ca_;
  std::unique_ptr<GrantFsService> service_;
  std::unique_ptr<GrantFsEndpoint> endpoint_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// With TLS, what each kind of certificate may call: mounts (node) and
// grantfsctl (admin) the file system; only admins Switchover and Check;
// servers none of it (they only read Status).
TEST_F(ServiceTlsTest, EachKindOfCallerMakesOnlyItsCalls) {
  struct Expect {
    const char* cn;
    grpc::StatusCode echo, check, switchover;
  };
  using grpc::StatusCode;
  for (const Expect& e : {Expect{"node:n1", StatusCode::OK, StatusCode::PERMISSION_DENIED,
                                 StatusCode::PERMISSION_DENIED},
                          Expect{"admin:ops", StatusCode::OK, StatusCode::OK, StatusCode::OK},
                          Expect{"server:b", StatusCode::PERMISSION_DENIED,
                                 StatusCode::PERMISSION_DENIED, StatusCode::PERMISSION_DENIED}}) {
    SCOPED_TRACE(e.cn);
    auto s = Stub(e.cn);
    proto::StatusReply status;
    EXPECT_EQ(s->Status(Ctx().get(), proto::StatusRequest(), &status).error_code(), StatusCode::OK);
    proto::EchoRequest echo;
    echo.set_reply_bytes(10);
    proto::EchoReply echoed;
    EXPECT_EQ(s->Echo(Ctx().get(), echo, &echoed).error_code(), e.echo);
    proto::CheckReply checked;
    EXPECT_EQ(s->Check(Ctx().get(), proto::CheckRequest(), &checked).error_code(), e.check);
    proto::ErrReply switched;
    EXPECT_EQ(s->Switchover(Ctx().get(), proto::SwitchoverRequest(), &switched).error_code(),
              e.switchover);
    if (e.switchover == StatusCode::OK) {
      EXPECT_EQ(switched.err(), ENOTSUP);  // standalone
    }
  }
  // No certificate: the handshake fails.
  auto plain = Stub(Transport());
  proto::StatusReply status;
  EXPECT_EQ(plain->Status(Ctx().get(), proto::StatusRequest(), &status).error_code(),
            StatusCode::UNAVAILABLE);
}

// What a node's certificate options do to its calls: without "root", uid 0
// is nobody (root squash); "anon" makes every caller nobody; "ro" refuses
// changes and opens for writing with EROFS but lets reads through.
// A session id is not a bearer token: a node that names another node's
// session is refused, and the owner goes on.
TEST_F(ServiceTlsTest, AnotherNodesSessionIsRefused) {
  auto a = Stub("node:a", "root");
  auto b = Stub("node:b", "root");
  proto::OpenSessionRequest open;
  open.set_client_name("a");
  proto::OpenSessionReply opened;
  ASSERT_TRUE(a->OpenSession(Ctx().get(), open, &opened).ok());
  ASSERT_EQ(opened.err(), 0);
  proto::HeartbeatRequest beat;
  beat.mutable_header()->set_client_id(opened.client_id());
  proto::HeartbeatReply beaten;
  EXPECT_EQ(b->Heartbeat(Ctx().get(), beat, &beaten).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  proto::CloseSessionRequest close;
  close.mutable_header()->set_client_id(opened.client_id());
  proto::CloseSessionReply closed;
  EXPECT_EQ(b->CloseSession(Ctx().get(), close, &closed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(a->Heartbeat(Ctx().get(), beat, &beaten).error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(volume_->sessions().List().size(), 1u);
}

TEST_F(ServiceTlsTest, NodeOptionsSquashRootAndMakeNodesReadOnly) {
  // MkNod in `parent` as (uid, gid); returns reply.err() and the owner.
  const auto mknod = [&](proto::GrantFs::Stub* s, uint64_t parent, const std::string& name,
                         uint32_t uid, uint32_t mode = S_IFREG | 0644) {
    proto::MkNodRequest req;
    req.mutable_header()->mutable_creds()->set_uid(uid);
    req.mutable_header()->mutable_creds()->set_gid(uid);
    req.set_parent(parent);
    req.set_name(name);
    req.set_mode(mode);
    req.set_exclusive(true);
    proto::AttrReply reply;
    EXPECT_TRUE(s->MkNod(Ctx().get(), req, &reply).ok());
    return std::make_pair(static_cast<int>(reply.err()), reply.attr());
  };
  auto trusted = Stub("node:t", "root");
  // A directory everyone may write in, and one only uid 1000 may.
  auto [err, open_dir] = mknod(trusted.get(), kRootIno, "open", 0, S_IFDIR | 0777);
  ASSERT_EQ(err, 0);
  auto [err2, user_dir] = mknod(trusted.get(), kRootIno, "user", 0, S_IFDIR | 0755);
  ASSERT_EQ(err2, 0);
  proto::SetAttrRequest chown;
  chown.set_ino(user_dir.ino());
  chown.set_valid(proto::SetAttrRequest::UID | proto::SetAttrRequest::GID);
  chown.set_uid(1000);
  chown.set_gid(1000);
  proto::AttrReply chowned;
  ASSERT_TRUE(trusted->SetAttr(Ctx().get(), chown, &chowned).ok());
  ASSERT_EQ(chowned.err(), 0);

  // Root squash: root of a node without "root" is nobody.
  auto squashed = Stub("node:s", "");
  EXPECT_EQ(mknod(squashed.get(), kRootIno, "by-root", 0).first, EACCES);
  auto [err3, made] = mknod(squashed.get(), open_dir.ino(), "by-root", 0);
  ASSERT_EQ(err3, 0);
  EXPECT_EQ(made.uid(), kNobody);
  EXPECT_EQ(made.gid(), kNobody);
  EXPECT_EQ(mknod(squashed.get(), user_dir.ino(), "by-1000", 1000).first, 0);  // ids trusted
  // anon: whoever calls is nobody.
  auto anon = Stub("node:a", "anon");
  EXPECT_EQ(mknod(anon.get(), user_dir.ino(), "anon-1000", 1000).first, EACCES);
  auto [err4, by_anon] = mknod(anon.get(), open_dir.ino(), "anon", 1000);
  ASSERT_EQ(err4, 0);
  EXPECT_EQ(by_anon.uid(), kNobody);
  // ro: no change, no open for writing; reads work.
  auto ro = Stub("node:r", "root,ro");
  EXPECT_EQ(mknod(ro.get(), open_dir.ino(), "ro", 0).first, EROFS);
  // Opens belong to a session.
  proto::OpenSessionRequest session;
  session.set_client_name("ro");
  proto::OpenSessionReply sessioned;
  ASSERT_TRUE(ro->OpenSession(Ctx().get(), session, &sessioned).ok());
  ASSERT_EQ(sessioned.err(), 0);
  proto::OpenRequest open;
  open.mutable_header()->set_client_id(sessioned.client_id());
  open.mutable_header()->set_seq(1);
  open.set_ino(made.ino());
  open.set_handle(1);
  open.set_flags(O_RDONLY);
  proto::OpenReply opened;
  grpc::Status st = ro->Open(Ctx().get(), open, &opened);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(opened.err(), 0);
  for (uint32_t flags : {O_WRONLY, O_RDWR, O_RDONLY | O_TRUNC}) {
    open.set_flags(flags);
    open.set_handle(open.handle() + 1);
    open.mutable_header()->set_seq(open.header().seq() + 1);
    st = ro->Open(Ctx().get(), open, &opened);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(opened.err(), EROFS) << flags;
  }
  proto::LookupRequest lookup;
  lookup.set_parent(open_dir.ino());
  lookup.set_name("by-root");
  proto::AttrReply found;
  ASSERT_TRUE(ro->Lookup(Ctx().get(), lookup, &found).ok());
  EXPECT_EQ(found.err(), 0);
}

// A node restricted to a subtree ("subtree=/proj") reaches /proj and what
// is below it, nothing else: every call naming an inode outside is refused
// with PERMISSION_DENIED, and nothing outside changes.
TEST_F(ServiceTlsTest, ANodeRestrictedToASubtreeReachesNothingOutsideIt) {
  auto admin = Stub("node:t", "root");
  auto node = Stub("node:p", "root,subtree=/proj");
  const auto mknod = [&](proto::GrantFs::Stub* s, uint64_t parent, const std::string& name,
                         uint32_t mode = S_IFREG | 0644) {
    proto::MkNodRequest req;
    req.set_parent(parent);
    req.set_name(name);
    req.set_mode(mode);
    proto::AttrReply reply;
    grpc::Status st = s->MkNod(Ctx().get(), req, &reply);
    EXPECT_TRUE(st.ok() || st.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    return std::make_tuple(st.error_code(), static_cast<int>(reply.err()), reply.attr());
  };
  const auto getattr = [&](proto::GrantFs::Stub* s, uint64_t ino) {
    proto::GetAttrRequest req;
    req.set_ino(ino);
    proto::AttrReply reply;
    grpc::Status st = s->GetAttr(Ctx().get(), req, &reply);
    return std::make_pair(st.error_code(), static_cast<int>(reply.err()));
  };
  const auto lookup = [&](proto::GrantFs::Stub* s, uint64_t parent, const std::string& name) {
    proto::LookupRequest req;
    req.set_parent(parent);
    req.set_name(name);
    proto::AttrReply reply;
    grpc::Status st = s->Lookup(Ctx().get(), req, &reply);
    return std::make_tuple(st.error_code(), static_cast<int>(reply.err()), reply.attr());
  };
  constexpr auto kDenied = grpc::StatusCode::PERMISSION_DENIED;
  constexpr auto kOk = grpc::StatusCode::OK;

  // Before /proj exists the node can do nothing, not even open a session.
  proto::OpenSessionRequest open_root;
  open_root.set_root("/proj");
  proto::OpenSessionReply opened;
  grpc::Status before = node->OpenSession(Ctx().get(), open_root, &opened);
  EXPECT_TRUE(before.error_code() == kDenied || (before.ok() && opened.err() == ENOENT))
      << before.error_message() << " " << opened.err();

  auto [c1, e1, proj] = mknod(admin.get(), kRootIno, "proj", S_IFDIR | 0755);
  ASSERT_EQ(e1, 0);
  auto [c2, e2, secret_dir] = mknod(admin.get(), kRootIno, "secret", S_IFDIR | 0755);
  ASSERT_EQ(e2, 0);
  auto [c3, e3, secret] = mknod(admin.get(), secret_dir.ino(), "key");
  ASSERT_EQ(e3, 0);
  auto [c4, e4, sub] = mknod(admin.get(), proj.ino(), "sub", S_IFDIR | 0755);
  ASSERT_EQ(e4, 0);

  // Its session may show /proj or a directory below it as its root, not "/".
  ASSERT_TRUE(node->OpenSession(Ctx().get(), open_root, &opened).ok());
  EXPECT_EQ(opened.err(), 0);
  EXPECT_EQ(opened.root_ino(), proj.ino());
  open_root.set_root("/proj/sub/");
  ASSERT_TRUE(node->OpenSession(Ctx().get(), open_root, &opened).ok());
  EXPECT_EQ(opened.root_ino(), sub.ino());
  for (const char* outside : {"/", "/secret", "/proj/.."}) {
    open_root.set_root(outside);
    grpc::Status st = node->OpenSession(Ctx().get(), open_root, &opened);
    EXPECT_TRUE(st.error_code() == kDenied || (st.ok() && opened.err() == EINVAL)) << outside;
  }

  // Inside: everything works, and what it makes is inside.
  auto [c5, e5, mine] = mknod(node.get(), sub.ino(), "mine");
  EXPECT_EQ(c5, kOk);
  EXPECT_EQ(e5, 0);
  EXPECT_EQ(getattr(node.get(), mine.ino()), std::make_pair(kOk, 0));
  EXPECT_EQ(getattr(node.get(), proj.ino()), std::make_pair(kOk, 0));
  EXPECT_EQ(std::get<1>(lookup(node.get(), proj.ino(), "sub")), 0);

  // Outside: refused, by inode and by name, whatever the call.
  EXPECT_EQ(getattr(node.get(), kRootIno).first, kDenied);
  EXPECT_EQ(getattr(node.get(), secret_dir.ino()).first, kDenied);
  EXPECT_EQ(getattr(node.get(), secret.ino()).first, kDenied);
  EXPECT_EQ(std::get<0>(lookup(node.get(), kRootIno, "secret")), kDenied);
  EXPECT_EQ(std::get<0>(lookup(node.get(), proj.ino(), "..")), kDenied);  // ".." of its top
  EXPECT_EQ(std::get<0>(mknod(node.get(), secret_dir.ino(), "planted")), kDenied);
  // An inode number not in use gets ENOENT, as on every node.
  EXPECT_EQ(getattr(node.get(), mine.ino() + 1000), std::make_pair(kOk, ENOENT));
  {
    proto::ReadDirRequest req;
    req.set_ino(secret_dir.ino());
    proto::ReadDirReply reply;
    EXPECT_EQ(node->ReadDir(Ctx().get(), req, &reply).error_code(), kDenied);
    EXPECT_EQ(reply.entries_size(), 0);
  }
  {
    proto::RenameRequest req;  // moving its file out, or a secret in
    req.set_parent(sub.ino());
    req.set_name("mine");
    req.set_new_parent(secret_dir.ino());
    req.set_new_name("mine");
    proto::RenameReply reply;
    EXPECT_EQ(node->Rename(Ctx().get(), req, &reply).error_code(), kDenied);
    req.set_parent(secret_dir.ino());
    req.set_name("key");
    req.set_new_parent(sub.ino());
    req.set_new_name("key");
    EXPECT_EQ(node->Rename(Ctx().get(), req, &reply).error_code(), kDenied);
  }
  {
    proto::LinkRequest req;  // a name inside for a file outside
    req.set_ino(secret.ino());
    req.set_new_parent(sub.ino());
    req.set_new_name("stolen");
    proto::AttrReply reply;
    EXPECT_EQ(node->Link(Ctx().get(), req, &reply).error_code(), kDenied);
  }
  {
    proto::SetXattrRequest req;
    req.set_ino(secret.ino());
    req.set_name("user.x");
    req.set_value("1");
    proto::ErrReply reply;
    EXPECT_EQ(node->SetXattr(Ctx().get(), req, &reply).error_code(), kDenied);
  }

  // A link another node made from outside into the subtree counts where its
  // file was made: not listed, not looked up. ".." of the top is the top.
  {
    proto::LinkRequest req;
    req.set_ino(secret.ino());
    req.set_new_parent(proj.ino());
    req.set_new_name("linked-in");
    proto::AttrReply reply;
    ASSERT_TRUE(admin->Link(Ctx().get(), req, &reply).ok());
    ASSERT_EQ(reply.err(), 0);
  }
  EXPECT_EQ(std::get<0>(lookup(node.get(), proj.ino(), "linked-in")), kDenied);
  {
    proto::ReadDirRequest req;
    req.set_ino(proj.ino());
    req.set_max_entries(100);
    proto::ReadDirReply reply;
    ASSERT_TRUE(node->ReadDir(Ctx().get(), req, &reply).ok());
    std::vector<std::string> names;
    for (const proto::DirEntry& e : reply.entries()) {
      names.push_back(e.name());
      EXPECT_NE(e.attr().ino(), kRootIno) << e.name();
      EXPECT_NE(e.attr().ino(), secret.ino()) << e.name();
    }
    EXPECT_EQ(names, (std::vector<std::string>{".", "..", "sub"}));
  }

  // Nothing outside changed; the admin's view is whole.
  EXPECT_EQ(std::get<1>(lookup(admin.get(), secret_dir.ino(), "planted")), ENOENT);
  EXPECT_EQ(std::get<1>(lookup(admin.get(), secret_dir.ino(), "key")), 0);
  EXPECT_EQ(std::get<1>(lookup(admin.get(), sub.ino(), "mine")), 0);
  EXPECT_EQ(std::get<1>(lookup(admin.get(), sub.ino(), "stolen")), ENOENT);

  // Moved out by another node, its file is out of its reach; renamed away,
  // its top no longer names a directory: every call is refused.
  {
    proto::RenameRequest req;
    req.set_parent(sub.ino());
    req.set_name("mine");
    req.set_new_parent(secret_dir.ino());
    req.set_new_name("mine");
    proto::RenameReply reply;
    ASSERT_TRUE(admin->Rename(Ctx().get(), req, &reply).ok());
    ASSERT_EQ(reply.err(), 0);
  }
  EXPECT_EQ(getattr(node.get(), mine.ino()).first, kDenied);
  {
    proto::RenameRequest req;
    req.set_parent(kRootIno);
    req.set_name("proj");
    req.set_new_parent(kRootIno);
    req.set_new_name("proj-old");
    proto::RenameReply reply;
    ASSERT_TRUE(admin->Rename(Ctx().get(), req, &reply).ok());
    ASSERT_EQ(reply.err(), 0);
  }
  EXPECT_EQ(getattr(node.get(), proj.ino()).first, kDenied);
}

// A restricted node and links another node made from outside into its
// subtree: it cannot remove, rename (and so pull in) or list them, a page
// of them does not end its listing early, and it hears nothing of changes
// outside. When its subtree names no directory, its session goes on but it
// reaches nothing. Every kind of call on an inode outside is refused.
TEST_F(ServiceTlsTest, ARestrictedNodeCannotTakeInAFileLinkedFromOutside) {
  auto admin = Stub("node:t", "root");
  auto node = Stub("node:p", "root,subtree=/proj");
  constexpr auto kDenied = grpc::StatusCode::PERMISSION_DENIED;
  const auto mknod = [&](proto::GrantFs::Stub* s, uint64_t parent, const std::string& name,
                         uint32_t mode = S_IFREG | 0644) {
    proto::MkNodRequest req;
    req.set_parent(parent);
    req.set_name(name);
    req.set_mode(mode);
    proto::AttrReply reply;
    EXPECT_TRUE(s->MkNod(Ctx().get(), req, &reply).ok());
    EXPECT_EQ(reply.err(), 0) << name;
    return reply.attr();
  };
  const auto link = [&](uint64_t ino, uint64_t parent, const std::string& name) {
    proto::LinkRequest req;
    req.set_ino(ino);
    req.set_new_parent(parent);
    req.set_new_name(name);
    proto::AttrReply reply;
    ASSERT_TRUE(admin->Link(Ctx().get(), req, &reply).ok());
    ASSERT_EQ(reply.err(), 0);
  };
  const auto getattr = [&](proto::GrantFs::Stub* s, uint64_t ino) {
    proto::GetAttrRequest req;
    req.set_ino(ino);
    proto::AttrReply reply;
    grpc::Status st = s->GetAttr(Ctx().get(), req, &reply);
    return std::make_pair(st.error_code(), static_cast<int>(reply.err()));
  };
  const proto::Attr proj = mknod(admin.get(), kRootIno, "proj", S_IFDIR | 0755);
  const proto::Attr many = mknod(admin.get(), proj.ino(), "many", S_IFDIR | 0755);
  const proto::Attr secret_dir = mknod(admin.get(), kRootIno, "secret", S_IFDIR | 0755);
  const proto::Attr key = mknod(admin.get(), secret_dir.ino(), "key");
  link(key.ino(), proj.ino(), "linked-in");
  for (int i = 0; i < 40; ++i) link(key.ino(), many.ino(), "l" + std::to_string(i));
  const proto::Attr mine = mknod(node.get(), many.ino(), "z-mine");

  // Its session, and its stream of changes.
  proto::OpenSessionRequest open_session;
  open_session.set_root("/proj");
  proto::OpenSessionReply session;
  ASSERT_TRUE(node->OpenSession(Ctx().get(), open_session, &session).ok());
  ASSERT_EQ(session.err(), 0);
  proto::SubscribeRequest sub;
  sub.mutable_header()->set_client_id(session.client_id());
  auto stream_ctx = Ctx();
  std::unique_ptr<grpc::ClientReader<proto::InvalidationBatch>> stream =
      node->Subscribe(stream_ctx.get(), sub);
  proto::InvalidationBatch batch;
  ASSERT_TRUE(stream->Read(&batch));
  ASSERT_TRUE(batch.subscribed());

  // Remove and rename of the link: refused; the link and the file stay.
  {
    proto::RemoveRequest req;
    req.set_parent(proj.ino());
    req.set_name("linked-in");
    proto::RemoveReply reply;
    EXPECT_EQ(node->Remove(Ctx().get(), req, &reply).error_code(), kDenied);
    EXPECT_EQ(reply.ino(), 0u);  // not told which inode it is
  }
  for (const auto& [from, to] :
       {std::make_pair("linked-in", "mine-now"), std::make_pair("z-mine", "linked-in")}) {
    proto::RenameRequest req;
    req.set_parent(from == std::string("z-mine") ? many.ino() : proj.ino());
    req.set_name(from);
    req.set_new_parent(proj.ino());
    req.set_new_name(to);
    proto::RenameReply reply;
    EXPECT_EQ(node->Rename(Ctx().get(), req, &reply).error_code(), kDenied) << from;
    req.set_flags(2);  // RENAME_EXCHANGE
    EXPECT_EQ(node->Rename(Ctx().get(), req, &reply).error_code(), kDenied) << from;
  }
  EXPECT_EQ(getattr(node.get(), key.ino()).first, kDenied);
  EXPECT_EQ(getattr(admin.get(), key.ino()), std::make_pair(grpc::StatusCode::OK, 0));

  // Every other kind of call on the file outside.
  auto header_of = [&](auto* req, uint64_t seq) {
    req->mutable_header()->set_client_id(session.client_id());
    req->mutable_header()->set_seq(seq);
  };
  uint64_t seq = 100;
  {
    proto::OpenRequest req;
    header_of(&req, ++seq);
    req.set_ino(key.ino());
    req.set_handle(1);
    req.set_flags(O_RDONLY);
    proto::OpenReply reply;
    EXPECT_EQ(node->Open(Ctx().get(), req, &reply).error_code(), kDenied);
  }
  {
    proto::ReadRequest req;
    header_of(&req, 0);
    req.set_ino(key.ino());
    req.set_size(10);
    proto::ReadReply reply;
    EXPECT_EQ(node->Read(Ctx().get(), req, &reply).error_code(), kDenied);
  }
  {
    proto::WriteRequest req;
    header_of(&req, ++seq);
    req.set_ino(key.ino());
    req.set_data("pwned");
    proto::WriteReply reply;
    EXPECT_EQ(node->Write(Ctx().get(), req, &reply).error_code(), kDenied);
  }
  {
    proto::SetAttrRequest req;
    header_of(&req, ++seq);
    req.set_ino(key.ino());
    req.set_valid(proto::SetAttrRequest::SIZE);
    proto::AttrReply reply;
    EXPECT_EQ(node->SetAttr(Ctx().get(), req, &reply).error_code(), kDenied);
  }
  {
    proto::FallocateRequest req;
    header_of(&req, ++seq);
    req.set_ino(key.ino());
    req.set_length(4096);
    proto::AttrReply reply;
    EXPECT_EQ(node->Fallocate(Ctx().get(), req, &reply).error_code(), kDenied);
  }
  {
    proto::FsyncRequest req;
    header_of(&req, 0);
    req.set_ino(key.ino());
    proto::ErrReply reply;
    EXPECT_EQ(node->Fsync(Ctx().get(), req, &reply).error_code(), kDenied);
  }
  {
    proto::LockRequest req;
    header_of(&req, ++seq);
    req.set_ino(key.ino());
    req.set_owner(1);
    req.mutable_range()->set_type(F_WRLCK);
    req.mutable_range()->set_end(~uint64_t{0});
    proto::ErrReply reply;
    EXPECT_EQ(node->SetLock(Ctx().get(), req, &reply).error_code(), kDenied);
  }
  {
    proto::SymlinkRequest req;
    header_of(&req, ++seq);
    req.set_parent(secret_dir.ino());
    req.set_name("planted");
    req.set_target("x");
    proto::AttrReply reply;
    EXPECT_EQ(node->Symlink(Ctx().get(), req, &reply).error_code(), kDenied);
  }
  {
    proto::ReclaimRequest req;
    header_of(&req, 0);
    proto::ReclaimRequest::Open* o = req.add_opens();
    o->set_ino(key.ino());
    o->set_handle(7);
    proto::ReclaimReply reply;
    ASSERT_TRUE(node->Reclaim(Ctx().get(), req, &reply).ok());
    EXPECT_EQ(std::vector<uint64_t>(reply.lost().begin(), reply.lost().end()),
              std::vector<uint64_t>{key.ino()});
  }

  // A listing of 40 links from outside and one file of its own, a few
  // entries a page: it sees its own file, after pages of nothing.
  {
    std::vector<std::string> names;
    uint64_t cookie = 0;
    for (int pages = 0; pages < 100; ++pages) {
      proto::ReadDirRequest req;
      header_of(&req, 0);
      req.set_ino(many.ino());
      req.set_cookie(cookie);
      req.set_max_entries(4);
      proto::ReadDirReply reply;
      ASSERT_TRUE(node->ReadDir(Ctx().get(), req, &reply).ok());
      ASSERT_EQ(reply.err(), 0);
      ASSERT_TRUE(reply.entries_size() > 0 || reply.eof());
      for (const proto::DirEntry& e : reply.entries()) {
        names.push_back(e.name());
        cookie = e.cookie();
      }
      if (reply.eof()) break;
    }
    EXPECT_EQ(names, (std::vector<std::string>{".", "..", "z-mine"}));
  }

  // Changes outside are not heard of; changes inside are.
  mknod(admin.get(), secret_dir.ino(), "payroll");
  mknod(admin.get(), proj.ino(), "visible");
  bool saw_visible = false;
  while (!saw_visible && stream->Read(&batch)) {
    for (const proto::Invalidation& it : batch.items()) {
      EXPECT_NE(it.parent(), secret_dir.ino()) << it.name();
      EXPECT_NE(it.name(), "payroll");
      if (it.parent() == proj.ino() && it.name() == "visible") saw_visible = true;
    }
  }
  EXPECT_TRUE(saw_visible);
  stream_ctx->TryCancel();
  stream->Finish();

  // Its subtree renamed away: its session goes on, it reaches nothing.
  {
    proto::RenameRequest req;
    req.set_parent(kRootIno);
    req.set_name("proj");
    req.set_new_parent(kRootIno);
    req.set_new_name("proj-old");
    proto::RenameReply reply;
    ASSERT_TRUE(admin->Rename(Ctx().get(), req, &reply).ok());
    ASSERT_EQ(reply.err(), 0);
  }
  {
    proto::HeartbeatRequest beat;
    header_of(&beat, 0);
    proto::HeartbeatReply beaten;
    EXPECT_TRUE(node->Heartbeat(Ctx().get(), beat, &beaten).ok());
  }
  EXPECT_EQ(getattr(node.get(), mine.ino()).first, kDenied);
  EXPECT_EQ(getattr(node.get(), proj.ino()).first, kDenied);
}

// A certificate whose subtree cannot be read reaches nothing.
TEST_F(ServiceTlsTest, ANodeWhoseSubtreeCannotBeReadReachesNothing) {
  auto node = Stub("node:bad", "root,subtree=relative/path");
  proto::GetAttrRequest req;
  req.set_ino(kRootIno);
  proto::AttrReply reply;
  EXPECT_EQ(node->GetAttr(Ctx().get(), req, &reply).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  proto::OpenSessionReply opened;
  EXPECT_EQ(node->OpenSession(Ctx().get(), proto::OpenSessionRequest(), &opened).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(ServiceTest, InodeZeroIsEinval) {
  proto::GetAttrRequest req;
  proto::AttrReply reply;
  ASSERT_TRUE(stub_->GetAttr(Ctx().get(), req, &reply).ok());
  EXPECT_EQ(reply.err(), EINVAL);
}

TEST_F(ServiceTest, UnknownInodeIsEnoent) {
  proto::GetAttrRequest req;
  req.set_ino(999999);
  proto::AttrReply reply;
  ASSERT_TRUE(stub_->GetAttr(Ctx().get(), req, &reply).ok());
  EXPECT_EQ(reply.err(), ENOENT);
}

TEST_F(ServiceTest, BadNamesGetPreciseErrnos) {
  EXPECT_EQ(MkNodErr(1, ""), EINVAL);
  EXPECT_EQ(MkNodErr(1, "."), EINVAL);
  EXPECT_EQ(MkNodErr(1, ".."), EINVAL);
  EXPECT_EQ(MkNodErr(1, "a/b"), EINVAL);
  EXPECT_EQ(MkNodErr(1, std::string("a\0b", 3)), EINVAL);
  EXPECT_EQ(MkNodErr(1, std::string(256, 'n')), ENAMETOOLONG);
  EXPECT_EQ(MkNodErr(1, std::string(255, 'n')), 0);
  EXPECT_EQ(MkNodErr(1, "bad-type", 0170000 | 0644), EINVAL);
}

TEST_F(ServiceTest, WrongFileTypes) {
  ASSERT_EQ(MkNodErr(1, "f"), 0);
  const uint64_t file = last_ino_;
  EXPECT_EQ(MkNodErr(file, "child"), ENOTDIR);  // parent is a file
  proto::ReadRequest rd;
  rd.set_ino(1);
  rd.set_size(10);
  proto::ReadReply rr;
  ASSERT_TRUE(stub_->Read(Ctx().get(), rd, &rr).ok());
  EXPECT_EQ(rr.err(), EISDIR);
  proto::ReadDirRequest rdd;
  rdd.set_ino(file);
  proto::ReadDirReply rdr;
  ASSERT_TRUE(stub_->ReadDir(Ctx().get(), rdd, &rdr).ok());
  EXPECT_EQ(rdr.err(), ENOTDIR);
  EXPECT_EQ(rdr.entries_size(), 0);
  proto::ReadLinkRequest rl;
  rl.set_ino(file);
  proto::ReadLinkReply rlr;
  ASSERT_TRUE(stub_->ReadLink(Ctx().get(), rl, &rlr).ok());
  EXPECT_EQ(rlr.err(), EINVAL);
}

TEST_F(ServiceTest, OffsetsPastTheMaximumFileSizeAreEfbig) {
  ASSERT_EQ(MkNodErr(1, "f"), 0);
  proto::WriteRequest w;
  w.set_ino(last_ino_);
  w.set_offset(uint64_t{1} << 40);
  w.set_data("x");
  proto::WriteReply wr;
  ASSERT_TRUE(stub_->Write(Ctx().get(), w, &wr).ok());
  EXPECT_EQ(wr.err(), EFBIG);
  w.set_offset(UINT64_MAX - 1);  // offset + size overflows
  ASSERT_TRUE(stub_->Write(Ctx().get(), w, &wr).ok());
  EXPECT_EQ(wr.err(), EFBIG);
  proto::SetAttrRequest t;
  t.set_ino(last_ino_);
  t.set_valid(proto::SetAttrRequest::SIZE);
  t.set_size((uint64_t{1} << 40) + 1);
  proto::AttrReply tr;
  ASSERT_TRUE(stub_->SetAttr(Ctx().get(), t, &tr).ok());
  EXPECT_EQ(tr.err(), EFBIG);
  EXPECT_EQ(volume_->Space().used_bytes, 0u);
}

TEST_F(ServiceTest, OversizedIoIsEinvalAndFullVolumeIsEnospc) {
  ASSERT_EQ(MkNodErr(1, "f"), 0);
  proto::ReadRequest rd;
  rd.set_ino(last_ino_);
  rd.set_size(64 << 20);
  proto::ReadReply rr;
  ASSERT_TRUE(stub_->Read(Ctx().get(), rd, &rr).ok());
  EXPECT_EQ(rr.err(), EINVAL);
  // 9 MiB in one write is over the 8 MiB limit.
  proto::WriteRequest w;
  w.set_ino(last_ino_);
  w.set_data(std::string(9 << 20, 'x'));
  proto::WriteReply wr;
  ASSERT_TRUE(stub_->Write(Ctx().get(), w, &wr).ok());
  EXPECT_EQ(wr.err(), EINVAL);
  // Fill the 64 MiB volume with 8 MiB writes; the ninth fails with ENOSPC
  // and leaves nothing behind.
  w.set_data(std::string(8 << 20, 'y'));
  for (int i = 0; i < 8; ++i) {
    w.set_offset(uint64_t(i) << 23);
    ASSERT_TRUE(stub_->Write(Ctx().get(), w, &wr).ok());
    ASSERT_EQ(wr.err(), 0) << i;
  }
  w.set_offset(uint64_t(8) << 23);
  ASSERT_TRUE(stub_->Write(Ctx().get(), w, &wr).ok());
  EXPECT_EQ(wr.err(), ENOSPC);
  EXPECT_EQ(volume_->Space().used_bytes, uint64_t{64} << 20);
  EXPECT_EQ(volume_->Space().reserved_bytes, 0u);
  // Overwriting allocated bytes needs no new space.
  w.set_offset(0);
  ASSERT_TRUE(stub_->Write(Ctx().get(), w, &wr).ok());
  EXPECT_EQ(wr.err(), 0);
}

TEST_F(ServiceTest, BadLockRequests) {
  ASSERT_EQ(MkNodErr(1, "f"), 0);
  proto::LockRequest l;
  l.set_ino(last_ino_);
  l.mutable_range()->set_type(7);  // not a lock type
  l.mutable_range()->set_end(10);
  proto::ErrReply r;
  ASSERT_TRUE(stub_->SetLock(Ctx().get(), l, &r).ok());
  EXPECT_EQ(r.err(), EINVAL);
  l.mutable_range()->set_type(1);
  l.mutable_range()->set_start(20);  // start > end
  ASSERT_TRUE(stub_->SetLock(Ctx().get(), l, &r).ok());
  EXPECT_EQ(r.err(), EINVAL);
}

TEST_F(ServiceTest, EchoRepliesWithRequestedBytesAndRejectsOversizedReplies) {
  proto::EchoRequest req;
  proto::EchoReply reply;
  req.set_payload("abc");
  req.set_reply_bytes(7);
  ASSERT_TRUE(stub_->Echo(Ctx().get(), req, &reply).ok());
  EXPECT_EQ(reply.err(), 0);
  EXPECT_EQ(reply.payload(), "abcabca");
  req.set_reply_bytes(0);  // one-way: payload in, nothing back
  ASSERT_TRUE(stub_->Echo(Ctx().get(), req, &reply).ok());
  EXPECT_EQ(reply.payload(), "");
  req.clear_payload();  // nothing to repeat: a non-zero filler
  req.set_reply_bytes(1 << 20);
  ASSERT_TRUE(stub_->Echo(Ctx().get(), req, &reply).ok());
  ASSERT_EQ(reply.payload().size(), 1u << 20);
  EXPECT_EQ(reply.payload().find('\0'), std::string::npos);
  req.set_reply_bytes((8 << 20) + 1);
  ASSERT_TRUE(stub_->Echo(Ctx().get(), req, &reply).ok());
  EXPECT_EQ(reply.err(), EINVAL);
  EXPECT_EQ(reply.payload(), "");
  EXPECT_EQ(stub_->Echo(Ctx("wrong").get(), req, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace grantfs

namespace grantfs {
namespace {

// Exactly-once: a request resent with the same (client id, seq) after it
// was applied gets its outcome, not a second application.
class OnceTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    proto::OpenSessionRequest req;
    proto::OpenSessionReply reply;
    ASSERT_TRUE(stub_->OpenSession(Ctx().get(), req, &reply).ok());
    client_ = reply.client_id();
  }
  template <typename Req>
  void Tag(Req* req, uint64_t seq) {
    req->mutable_header()->set_client_id(client_);
    req->mutable_header()->set_seq(seq);
  }
  proto::AttrReply Create(uint64_t seq, const std::string& name) {
    proto::MkNodRequest req;
    Tag(&req, seq);
    req.set_parent(1);
    req.set_name(name);
    req.set_mode(S_IFREG | 0644);
    req.set_exclusive(true);
    proto::AttrReply reply;
    EXPECT_TRUE(stub_->MkNod(Ctx().get(), req, &reply).ok());
    return reply;
  }
  proto::RenameReply Rename(uint64_t seq, const std::string& from, const std::string& to) {
    proto::RenameRequest req;
    Tag(&req, seq);
    req.set_parent(1);
    req.set_name(from);
    req.set_new_parent(1);
    req.set_new_name(to);
    proto::RenameReply reply;
    EXPECT_TRUE(stub_->Rename(Ctx().get(), req, &reply).ok());
    return reply;
  }
  int RenameErr(uint64_t seq, const std::string& from, const std::string& to) {
    return Rename(seq, from, to).err();
  }
  proto::RemoveReply Remove(uint64_t seq, const std::string& name) {
    proto::RemoveRequest req;
    Tag(&req, seq);
    req.set_parent(1);
    req.set_name(name);
    proto::RemoveReply reply;
    EXPECT_TRUE(stub_->Remove(Ctx().get(), req, &reply).ok());
    return reply;
  }
  proto::WriteReply Write(uint64_t seq, uint64_t ino, uint64_t offset, const std::string& data) {
    proto::WriteRequest req;
    Tag(&req, seq);
    req.set_ino(ino);
    req.set_offset(offset);
    req.set_data(data);
    req.set_from_grant(true);
    proto::WriteReply reply;
    EXPECT_TRUE(stub_->Write(Ctx().get(), req, &reply).ok());
    return reply;
  }
  uint64_t client_ = 0;
};

TEST_F(OnceTest, RetriedCreateReturnsTheSameInodeNotEexist) {
  proto::AttrReply first = Create(10, "a");
  ASSERT_EQ(first.err(), 0);
  proto::AttrReply retry = Create(10, "a");
  EXPECT_EQ(retry.err(), 0);
  EXPECT_EQ(retry.attr().ino(), first.attr().ino());
  // A new request (new seq) for the same name is a real second create.
  EXPECT_EQ(Create(11, "a").err(), EEXIST);
  EXPECT_EQ(volume_->Space().inodes, 2u);  // root + a
}

TEST_F(OnceTest, RetriedRenameSucceedsInsteadOfEnoent) {
  ASSERT_EQ(Create(1, "x").err(), 0);
  EXPECT_EQ(RenameErr(2, "x", "y"), 0);
  EXPECT_EQ(RenameErr(2, "x", "y"), 0);       // the retry
  EXPECT_EQ(RenameErr(3, "x", "y"), ENOENT);  // a new rename of a gone name
}

TEST_F(OnceTest, RenameAndRemoveSayWhichInodesLostANameButARetryCannot) {
  const uint64_t x = Create(1, "x").attr().ino();
  const uint64_t y = Create(2, "y").attr().ino();
  proto::RenameReply rn = Rename(3, "x", "y");
  EXPECT_EQ(rn.err(), 0);
  EXPECT_TRUE(rn.known());
  EXPECT_EQ(rn.moved(), x);
  EXPECT_EQ(rn.replaced(), y);
  // The retry is answered from the dedupe record, which does not keep them.
  proto::RenameReply again = Rename(3, "x", "y");
  EXPECT_EQ(again.err(), 0);
  EXPECT_FALSE(again.known());
  proto::RemoveReply rm = Remove(4, "y");
  EXPECT_EQ(rm.err(), 0);
  EXPECT_TRUE(rm.known());
  EXPECT_EQ(rm.ino(), x);
  proto::RemoveReply rm_again = Remove(4, "y");
  EXPECT_EQ(rm_again.err(), 0);
  EXPECT_FALSE(rm_again.known());
}

TEST_F(OnceTest, FailedRequestsAreNotRecordedAndRunAgain) {
  EXPECT_EQ(RenameErr(5, "missing", "z"), ENOENT);
  ASSERT_EQ(Create(6, "missing").err(), 0);
  EXPECT_EQ(RenameErr(5, "missing", "z"), 0);  // nothing was applied the first time
}

TEST_F(OnceTest, RetriedWriteUsesTheGrantOnce) {
  proto::GrantRequest g;
  Tag(&g, 20);
  g.set_wanted_bytes(1 << 20);
  proto::GrantReply gr;
  ASSERT_TRUE(stub_->Grant(Ctx().get(), g, &gr).ok());
  ASSERT_EQ(gr.granted_bytes(), 1u << 20);
  proto::GrantReply gr2;
  ASSERT_TRUE(stub_->Grant(Ctx().get(), g, &gr2).ok());  // the retry adds nothing
  EXPECT_EQ(gr2.granted_bytes(), 1u << 20);
  EXPECT_EQ(gr2.grant_bytes(), 1u << 20);

  const uint64_t ino = Create(21, "f").attr().ino();
  const std::string data(64 << 10, 'w');
  proto::WriteReply w1 = Write(22, ino, 0, data);
  ASSERT_EQ(w1.err(), 0);
  EXPECT_EQ(w1.grant_used_bytes(), 64u << 10);
  proto::WriteReply w2 = Write(22, ino, 0, data);
  EXPECT_EQ(w2.err(), 0);
  EXPECT_EQ(w2.grant_used_bytes(), w1.grant_used_bytes());
  EXPECT_EQ(w2.grant_bytes(), (1u << 20) - (64u << 10));
  EXPECT_EQ(w2.attr().size(), data.size());
  EXPECT_EQ(volume_->Space().used_bytes, 64u << 10);
}

TEST_F(OnceTest, RecordsSurviveARestartAndExpire) {
  const uint64_t ino = Create(30, "r").attr().ino();
  server_->Shutdown();
  volume_.reset();
  VolumeOptions vo;
  vo.dir = dir_ + "/vol";
  vo.capacity_bytes = 64 << 20;
  vo.background = false;
  volume_ = *Volume::Open(vo);
  auto rec = volume_->meta().sessions().FindDedupe(client_, 30);
  ASSERT_TRUE(rec.ok());
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->value(), ino);
  EXPECT_EQ(*volume_->meta().sessions().ExpireDedupe(absl::Hours(1)), 0);
  EXPECT_EQ(*volume_->meta().sessions().ExpireDedupe(absl::ZeroDuration()), 1);
  EXPECT_FALSE(volume_->meta().sessions().FindDedupe(client_, 30)->has_value());
}

}  // namespace
}  // namespace grantfs
