"""The S3 client's request signing (components/lab/etcd_s3_client.py) against AWS's own worked
examples of Signature Version 4 for S3 (docs.aws.amazon.com/AmazonS3/latest/API/
sig-v4-header-based-auth.html, "Examples: Signature Calculations"): the published signatures for the
example credentials, bucket and time. gofakes3 (test_etcd_backup_s3_real.py) does not check
signatures, so this is what holds the client to what S3 verifies. And the retention's choice, by
count and by age."""

from __future__ import annotations

import datetime

import pytest

from components.lab.etcd_s3_client import EMPTY_SHA256, Bucket, authorization, expired

KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
WHEN = datetime.datetime(2013, 5, 24, tzinfo=datetime.UTC)
HEADERS = {"host": "examplebucket.s3.amazonaws.com", "x-amz-date": "20130524T000000Z",
           "x-amz-content-sha256": EMPTY_SHA256}


@pytest.mark.parametrize(("method", "path", "query", "extra", "signature"), [
    # GET Object, with a Range header
    ("GET", "/test.txt", {}, {"Range": "bytes=0-9"}, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"),
    # GET Bucket Lifecycle: a sub-resource with an empty value
    ("GET", "/", {"lifecycle": ""}, {}, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"),
    # GET Bucket (List Objects)
    ("GET", "/", {"max-keys": "2", "prefix": "J"}, {}, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
], ids=["get-object", "lifecycle", "list-objects"])
def test_signature_matches_awss_published_examples(method: str, path: str, query: dict[str, str],
                                                   extra: dict[str, str], signature: str) -> None:
    header = authorization(method, path, query, {**HEADERS, **extra}, EMPTY_SHA256, WHEN, "us-east-1", KEY_ID, SECRET)
    names = ";".join(sorted(["host", "x-amz-content-sha256", "x-amz-date", *(h.lower() for h in extra)]))
    assert header == (f"AWS4-HMAC-SHA256 Credential={KEY_ID}/20130524/us-east-1/s3/aws4_request, "
                      f"SignedHeaders={names}, Signature={signature}")


NOW = datetime.datetime(2026, 11, 28, 12, tzinfo=datetime.UTC)


def _names(node: str, *days: int) -> list[str]:
    return [f"etcd-{node}-{(NOW - datetime.timedelta(days=d)):%Y%m%dT%H%M%SZ}.db.enc" for d in days]


def test_retention_counts_only_this_members_names() -> None:
    own = _names("cp-1", 5, 4, 3, 2, 1)
    others = [*_names("cp-10", 9, 8), *_names("cp", 9), "etcd-cp-1-notes.db.enc", "etcd-cp-1-20200101T000000Z.db"]
    assert expired(own + others, "cp-1", 3, None, NOW) == sorted(own)[:2]


def test_retention_by_age_never_deletes_the_newest() -> None:
    own = _names("cp-1", 40, 30, 20)
    assert expired(own, "cp-1", 10, 7, NOW) == sorted(own)[:2]
    assert expired(own, "cp-1", 10, None, NOW) == []


@pytest.mark.parametrize(("query", "signature"), [
    ({"lifecycle": ""}, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"),
    ({"max-keys": "2", "prefix": "J"}, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
], ids=["lifecycle", "list-objects"])
def test_virtual_hosted_requests_sign_as_awss_examples(query: dict[str, str], signature: str) -> None:
    """addressing: virtual puts the bucket in the host (AWS's examples are virtual-hosted); the
    client's own request building, not a hand-made header set, gives the published signature."""
    bucket = Bucket({"endpoint": "https://s3.amazonaws.com", "bucket": "examplebucket", "prefix": "a/",
                     "region": "us-east-1", "accessKeyId": KEY_ID, "secretAccessKey": SECRET, "addressing": "virtual"})
    url, headers = bucket.signed("GET", "", query, EMPTY_SHA256, None, WHEN)
    assert headers["host"] == "examplebucket.s3.amazonaws.com"
    assert url.startswith("https://examplebucket.s3.amazonaws.com/?")
    assert headers["authorization"].endswith(f"Signature={signature}")
    assert bucket.address("lab-a/etcd/x.db.enc") == ("examplebucket.s3.amazonaws.com", "/lab-a/etcd/x.db.enc")


def test_path_style_puts_the_bucket_in_the_path() -> None:
    bucket = Bucket({"endpoint": "https://minio.lab:9000", "bucket": "examplebucket", "prefix": "a/",
                     "region": "us-east-1", "accessKeyId": KEY_ID, "secretAccessKey": SECRET})
    assert bucket.address("") == ("minio.lab:9000", "/examplebucket")
    url, headers = bucket.signed("GET", "lab-a/x y.enc", {}, EMPTY_SHA256, None, WHEN)
    assert url == "https://minio.lab:9000/examplebucket/lab-a/x%20y.enc" and headers["host"] == "minio.lab:9000"


def _before(node: str, *days: int) -> list[str]:
    return [f"etcd-{node}-pre-upgrade-{(NOW - datetime.timedelta(days=d)):%Y%m%dT%H%M%SZ}-v1.34.2-to-v1.34.3.db.enc"
            for d in days]


def test_pre_upgrade_objects_are_not_counted_and_go_only_by_age() -> None:
    """A pre-upgrade object is kept out of `retain` (scheduled snapshots would push it out within a
    day); with retainDays it goes by age like the others, never the member's newest of them."""
    scheduled, before = _names("cp-1", 3, 2, 1), _before("cp-1", 50, 40, 2)
    assert expired(scheduled + before, "cp-1", 1, None, NOW) == sorted(scheduled)[:2]
    assert expired(scheduled + before, "cp-1", 10, 7, NOW) == sorted(before)[:2]
    only_old = _before("cp-1", 60, 50)
    assert expired(only_old, "cp-1", 1, 7, NOW) == sorted(only_old)[:1]
    # Another member's pre-upgrade objects, and a node whose name ends like one, are not this member's.
    assert expired([*_before("cp-10", 60, 50), *_names("cp-1-pre-upgrade", 60, 50)], "cp-1", 1, 7, NOW) == []
