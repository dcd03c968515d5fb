"""The smallest end-to-end check: a file written on one node is read on the other."""

import os


def test_file_written_on_node1_is_read_on_node2(cluster):
    with open(os.path.join(cluster.n1, "hello.txt"), "w") as f:
        f.write("hello from node1\n")
    with open(os.path.join(cluster.n2, "hello.txt")) as f:
        assert f.read() == "hello from node1\n"
    assert "sessions:        2" in cluster.server.ctl("status")
