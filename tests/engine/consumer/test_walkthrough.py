"""The ORDERS + DISPATCH walkthrough of the consumer-model seed, as nats-server 2.15.1
reports it (delivered = the last delivered message, not the next one)."""

from __future__ import annotations


def test_dispatch_walkthrough(make):
    c = make(durable_name="DISPATCH", ack_policy="explicit", ack_wait=30.0, followers=2)
    # a clean stream and consumer
    assert c.row() == ("0/0", "0/0", 0, 0, 0)

    # publish "order 4", fetch it and ack it
    c.pub("ORDERS.processed", b"order 4")
    [m] = c.fetch()
    assert m.data == b"order 4" and m.num_delivered == 1
    c.ack(m.stream_seq)
    assert c.row() == ("1/1", "1/1", 0, 0, 0)

    # publish "order 5", fetch without acking
    c.pub("ORDERS.processed", b"order 5")
    [m] = c.fetch()
    assert (m.data, m.stream_seq, m.consumer_seq, m.num_delivered) == (b"order 5", 2, 2, 1)
    assert c.row() == ("2/2", "1/1", 1, 0, 0)

    # nothing more to give before ack_wait
    assert c.fetch() == []

    # after ack_wait it comes again, still not acked
    c.tick(30.001)
    [m] = c.fetch()
    assert (m.data, m.stream_seq, m.consumer_seq, m.num_delivered) == (b"order 5", 2, 3, 2)
    assert m.reply.startswith("$JS.ACK.ORDERS.DISPATCH.2.2.3.")
    assert c.row() == ("3/2", "1/1", 1, 1, 0)

    # and once more; this time it is acked
    c.tick(30.001)
    [m] = c.fetch()
    assert (m.consumer_seq, m.num_delivered) == (4, 3)
    c.ack(m.stream_seq)
    assert c.row() == ("4/2", "4/2", 0, 0, 0)
    assert c.replicas_agree()
    for f in c.followers:
        i = f.info(c.now)
        assert (i.delivered.consumer_seq, i.delivered.stream_seq) == (4, 2)
        assert (i.ack_floor.consumer_seq, i.ack_floor.stream_seq) == (4, 2)
        assert (i.num_ack_pending, i.num_redelivered) == (0, 0)


def test_walkthrough_info_fields(make, clock):
    c = make()
    c.pub()
    i = c.engine.info(c.now)
    assert i.stream_name == "ORDERS" and i.name == "DISPATCH"
    assert i.num_pending == 1 and i.num_waiting == 0
    assert i.config.ack_wait == 30.0 and i.config.max_ack_pending == 1000
    assert i.created is not None and i.delivered.last_active is None
    c.fetch()
    clock.advance(1)
    c.ack(1)
    i = c.engine.info(c.now)
    assert i.delivered.last_active is not None and i.ack_floor.last_active is not None
    assert i.ack_floor.last_active > i.delivered.last_active
