"""RFC 6962 / RFC 9162 Merkle trees (``bernstein.schemas.merkle``) against published reference data.

- The RFC 6962 reference tree of 8 leaves, its root at every size 0..8 and every perfect
  subtree's hash: ``testonly/constants.go`` of github.com/transparency-dev/merkle (the same
  values as certificate-transparency's C++ and Go merkle tests).
- Every inclusion and consistency probe of transparency-dev/merkle's ``testdata/inclusion``
  and ``testdata/consistency`` (commit 417fb0c314750d94e53942e9f92e79b6d35915db): happy paths
  and mutations with the verdict the Go verifier gives, packed below (each base64 string
  once, in ``TD_B64``; probes name them by index; a ``None`` proof is written ``()``).
- The old root a consistency path derives from the new root alone (``consistency_old_root``, which
  ``verify_consistency`` runs): every published old root of the reference tree and of the happy paths.
- The proof makers against a line-by-line transcription of RFC 9162 2.1.3.1 and 2.1.4.1
  (recursive, slicing) for every index and old size of every tree up to 64 leaves.
- Hypothesis (fixed seed, tests/conftest.py): proofs made verify for random sizes up to 300;
  flipping any bit of a proof hash, the root, the leaf hash, the leaf index or the old size
  fails; the frontier's root equals ``root()`` at every size; frontier bytes round-trip and
  damaged bytes are refused with ``MalformedFrontier``.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bernstein.schemas import merkle
from bernstein.schemas.errors import MalformedInput
from bernstein.schemas.merkle import (
    EMPTY_ROOT,
    Frontier,
    MalformedFrontier,
    MalformedProof,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
    verify_inclusion,
)

# transparency-dev/merkle testonly/constants.go: LeafInputs(), RootHashes(), NodeHashes()
RFC6962_LEAVES = [
    bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f")
]
RFC6962_ROOTS = [
    bytes.fromhex(h)
    for h in (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]
RFC6962_NODES = [  # [level][index]: the root of leaves [index * 2**level, (index + 1) * 2**level)
    [
        bytes.fromhex(h)
        for h in (
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
            "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
        )
    ],
    [
        bytes.fromhex(h)
        for h in (
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        )
    ],
    [
        bytes.fromhex(h)
        for h in (
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        )
    ],
    [bytes.fromhex("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")],
]
# transparency-dev/merkle testonly/constants.go CompactTrees(): the frontier at each size, as (level, index) of NodeHashes
RFC6962_FRONTIERS = [
    [],
    [(0, 0)],
    [(1, 0)],
    [(1, 0), (0, 2)],
    [(2, 0)],
    [(2, 0), (0, 4)],
    [(2, 0), (1, 2)],
    [(2, 0), (1, 2), (0, 6)],
    [(3, 0)],
]
RFC6962_HASHES = [leaf_hash(leaf) for leaf in RFC6962_LEAVES]

# transparency-dev/merkle testdata/{inclusion,consistency}/**/*.json at 417fb0c314750d94e53942e9f92e79b6d35915db
TD_B64 = (
    "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
    "bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=",
    "",
    "q6yroAAAAAAAAAAAAAAAAAAAAAAAAAAAAGAGHgASNFY=",
    "V3JvbmdMZWFm",
    "lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=",
    "Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
    "a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ=",
    "XcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=",
    "nqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=",
    "Vwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
    "Y0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ=",
    "QnGia+DYqE8L1UyMMC58s6O10fpngKQLzOKHNHfatlg=",
    "vBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms=",
    "yoVOoSjtBQtBs1/8G4e46yveRh6eO1WW7Oa51ZdaCuA=",
    "037kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc=",
    "tBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms=",
    "woVOoSjtBQtBs1/8G4e46yveRh6eO1WW7Oa51ZdaCuA=",
    "237kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc=",
    "ApjRIpBtz8EIkstTpzmS/FufST6kybrbJ7eRtBJ6f+c=",
    "+sVCA+fMaWzw38tCySodnbr3CtnmIfS9jZhmLwDjwSU=",
    "rra8/idLcKFPsGel5VeCZNsPqbUa9eC6FZFY8yngbnc=",
    "8sVCA+fMaWzw38tCySodnbr3CtnmIfS9jZhmLwDjwSU=",
    "Tju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=",
    "ZjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=",
    "DTrtAjFI/9KiWfvQzcf7PPl1ZYdg03dbgq9vkKrMLfw=",
    "hqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=",
    "Twg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
    "e0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ=",
    "V3JvbmdSb290",
    "duZ9rbzfHhDht03cYIq9L5jfsW+851J3tSMqEn8gh+8=",
    "DrxdNDf74tsVi58Sah0RjjCBgQMdCpSfje3t68VY72o=",
    "HrxdNDf74tsVi58Sah0RjjCBgQMdCpSfje3t68VY72o=",
    "2oVOoSjtBQtBs1/8G4e46yveRh6eO1WW7Oa51ZdaCuA=",
    "w37kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc=",
    "rBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms=",
    "3bib5AOAnjJXUNPSY814kpwpQreUKjS3fhIslZSnTIw=",
    "sIaT7C5yFZcTBkHoIR5+7cy0wmQTlj7ubB4u0W/7Gl8=",
    "oIaT7C5yFZcTBkHoIR5+7cy0wmQTlj7ubB4u0W/7Gl8=",
    "ZG9uJ3QgY2FyZSAy",
    "ZG9uJ3QgY2FyZSAx",
)
TD_INCLUSION = [
    ("0/empty-root", 0, 1, 0, 1, (), True),
    ("0/happy-path", 0, 1, 1, 1, (), False),
    ("0/leafIdx-XOR-@2", 2, 1, 1, 1, (), True),
    ("0/leafIdx-plus-@1", 1, 1, 1, 1, (), True),
    ("0/leafIdx-sub-@1", 18446744073709551615, 1, 1, 1, (), True),
    ("0/preceding-garbage", 0, 1, 1, 1, (2,), True),
    ("0/preceding-root", 0, 1, 1, 1, (1,), True),
    ("0/random-root", 0, 1, 3, 1, (), True),
    ("0/trailing-garbage", 0, 1, 1, 1, (2,), True),
    ("0/trailing-root", 0, 1, 1, 1, (1,), True),
    ("0/treeSize-div-@2", 0, 0, 1, 1, (), True),
    ("0/treeSize-mul-@2", 0, 2, 1, 1, (), True),
    ("0/wrong-leaf", 0, 1, 1, 4, (), True),
    ("1/empty-root", 0, 8, 0, 1, (5, 6, 7), True),
    ("1/happy-path", 0, 8, 8, 1, (5, 6, 7), False),
    ("1/inserted-component", 0, 8, 8, 1, (5, 3, 6, 7), True),
    ("1/leafIdx-XOR-@2", 2, 8, 8, 1, (5, 6, 7), True),
    ("1/leafIdx-plus-@1", 1, 8, 8, 1, (5, 6, 7), True),
    ("1/leafIdx-sub-@1", 18446744073709551615, 8, 8, 1, (5, 6, 7), True),
    ("1/modified-proof[0]-bit-@3", 0, 8, 8, 1, (9, 6, 7), True),
    ("1/modified-proof[1]-bit-@3", 0, 8, 8, 1, (5, 10, 7), True),
    ("1/modified-proof[2]-bit-@3", 0, 8, 8, 1, (5, 6, 11), True),
    ("1/preceding-garbage", 0, 8, 8, 1, (2, 5, 6, 7), True),
    ("1/preceding-root", 0, 8, 8, 1, (8, 5, 6, 7), True),
    ("1/random-root", 0, 8, 3, 1, (5, 6, 7), True),
    ("1/removed-component", 0, 8, 8, 1, (5, 6), True),
    ("1/trailing-garbage", 0, 8, 8, 1, (5, 6, 7, 2), True),
    ("1/trailing-root", 0, 8, 8, 1, (5, 6, 7, 8), True),
    ("1/treeSize-div-@2", 0, 4, 8, 1, (5, 6, 7), True),
    ("1/treeSize-mul-@2", 0, 16, 8, 1, (5, 6, 7), True),
    ("1/wrong-leaf", 0, 8, 8, 4, (5, 6, 7), True),
    ("2/empty-root", 5, 8, 0, 12, (13, 14, 15), True),
    ("2/happy-path", 5, 8, 8, 12, (13, 14, 15), False),
    ("2/inserted-component", 5, 8, 8, 12, (13, 3, 14, 15), True),
    ("2/leafIdx-XOR-@2", 7, 8, 8, 12, (13, 14, 15), True),
    ("2/leafIdx-plus-@1", 6, 8, 8, 12, (13, 14, 15), True),
    ("2/leafIdx-sub-@1", 4, 8, 8, 12, (13, 14, 15), True),
    ("2/modified-proof[0]-bit-@3", 5, 8, 8, 12, (16, 14, 15), True),
    ("2/modified-proof[1]-bit-@3", 5, 8, 8, 12, (13, 17, 15), True),
    ("2/modified-proof[2]-bit-@3", 5, 8, 8, 12, (13, 14, 18), True),
    ("2/preceding-garbage", 5, 8, 8, 12, (2, 13, 14, 15), True),
    ("2/preceding-root", 5, 8, 8, 12, (8, 13, 14, 15), True),
    ("2/random-root", 5, 8, 3, 12, (13, 14, 15), True),
    ("2/removed-component", 5, 8, 8, 12, (13, 14), True),
    ("2/trailing-garbage", 5, 8, 8, 12, (13, 14, 15, 2), True),
    ("2/trailing-root", 5, 8, 8, 12, (13, 14, 15, 8), True),
    ("2/treeSize-div-@2", 5, 4, 8, 12, (13, 14, 15), True),
    ("2/treeSize-mul-@2", 5, 16, 8, 12, (13, 14, 15), True),
    ("2/wrong-leaf", 5, 8, 8, 4, (13, 14, 15), True),
    ("3/empty-root", 2, 3, 0, 19, (20,), True),
    ("3/happy-path", 2, 3, 21, 19, (20,), False),
    ("3/leafIdx-XOR-@2", 0, 3, 21, 19, (20,), True),
    ("3/leafIdx-plus-@1", 3, 3, 21, 19, (20,), True),
    ("3/leafIdx-sub-@1", 1, 3, 21, 19, (20,), True),
    ("3/modified-proof[0]-bit-@3", 2, 3, 21, 19, (22,), True),
    ("3/preceding-garbage", 2, 3, 21, 19, (2, 20), True),
    ("3/preceding-root", 2, 3, 21, 19, (21, 20), True),
    ("3/random-root", 2, 3, 3, 19, (20,), True),
    ("3/removed-component", 2, 3, 21, 19, (), True),
    ("3/trailing-garbage", 2, 3, 21, 19, (20, 2), True),
    ("3/trailing-root", 2, 3, 21, 19, (20, 21), True),
    ("3/treeSize-div-@2", 2, 1, 21, 19, (20,), True),
    ("3/treeSize-mul-@2", 2, 6, 21, 19, (20,), True),
    ("3/wrong-leaf", 2, 3, 21, 4, (20,), True),
    ("4/empty-root", 1, 5, 0, 5, (1, 6, 13), True),
    ("4/happy-path", 1, 5, 23, 5, (1, 6, 13), False),
    ("4/inserted-component", 1, 5, 23, 5, (1, 3, 6, 13), True),
    ("4/leafIdx-XOR-@2", 3, 5, 23, 5, (1, 6, 13), True),
    ("4/leafIdx-plus-@1", 2, 5, 23, 5, (1, 6, 13), True),
    ("4/leafIdx-sub-@1", 0, 5, 23, 5, (1, 6, 13), True),
    ("4/modified-proof[0]-bit-@3", 1, 5, 23, 5, (24, 6, 13), True),
    ("4/modified-proof[1]-bit-@3", 1, 5, 23, 5, (1, 10, 13), True),
    ("4/modified-proof[2]-bit-@3", 1, 5, 23, 5, (1, 6, 16), True),
    ("4/preceding-garbage", 1, 5, 23, 5, (2, 1, 6, 13), True),
    ("4/preceding-root", 1, 5, 23, 5, (23, 1, 6, 13), True),
    ("4/random-root", 1, 5, 3, 5, (1, 6, 13), True),
    ("4/removed-component", 1, 5, 23, 5, (1, 6), True),
    ("4/trailing-garbage", 1, 5, 23, 5, (1, 6, 13, 2), True),
    ("4/trailing-root", 1, 5, 23, 5, (1, 6, 13, 23), True),
    ("4/treeSize-div-@2", 1, 2, 23, 5, (1, 6, 13), True),
    ("4/treeSize-mul-@2", 1, 10, 23, 5, (1, 6, 13), True),
    ("4/wrong-leaf", 1, 5, 23, 4, (1, 6, 13), True),
    ("additional/0/empty-root-and-random-leaf", 0, 0, 0, 3, (), True),
    ("additional/0/empty-root", 0, 0, 0, 2, (), True),
    ("additional/0/random-leaf", 0, 0, 2, 3, (), True),
    ("additional/1/empty-root-and-random-leaf", 0, 1, 0, 3, (), True),
    ("additional/1/empty-root", 0, 1, 0, 2, (), True),
    ("additional/1/random-leaf", 0, 1, 2, 3, (), True),
    ("additional/2/empty-root-and-random-leaf", 1, 0, 0, 3, (), True),
    ("additional/2/empty-root", 1, 0, 0, 2, (), True),
    ("additional/2/random-leaf", 1, 0, 2, 3, (), True),
    ("additional/3/empty-root-and-random-leaf", 2, 1, 0, 3, (), True),
    ("additional/3/empty-root", 2, 1, 0, 2, (), True),
    ("additional/3/random-leaf", 2, 1, 2, 3, (), True),
    ("single-entry/empty-leaf", 0, 1, 25, 2, (), True),
    ("single-entry/empty-root-and-leaf", 0, 1, 2, 2, (), True),
    ("single-entry/empty-root", 0, 1, 2, 25, (), True),
    ("single-entry/matching-root-and-leaf", 0, 1, 25, 25, (), False),
]
TD_CONSISTENCY = [
    ("0/happy-path", 1, 1, 1, 1, (), False),
    ("1/empty-proof", 1, 8, 1, 8, (), True),
    ("1/happy-path", 1, 8, 1, 8, (5, 6, 7), False),
    ("1/modified-proof@0-bit-@4", 1, 8, 1, 8, (26, 6, 7), True),
    ("1/modified-proof@1-bit-@4", 1, 8, 1, 8, (5, 27, 7), True),
    ("1/modified-proof@2-bit-@4", 1, 8, 1, 8, (5, 6, 28), True),
    ("1/preceding-garbage", 1, 8, 1, 8, (2, 5, 6, 7), True),
    ("1/preceding-proof-@0", 1, 8, 1, 8, (5, 5, 6, 7), True),
    ("1/preceding-root1", 1, 8, 1, 8, (1, 5, 6, 7), True),
    ("1/preceding-root2", 1, 8, 1, 8, (8, 5, 6, 7), True),
    ("1/size1-XOR-@2", 3, 8, 1, 8, (5, 6, 7), True),
    ("1/size1-plus-@1", 2, 8, 1, 8, (5, 6, 7), True),
    ("1/size1-sub-@1", 0, 8, 1, 8, (5, 6, 7), True),
    ("1/size2-div-@2", 1, 4, 1, 8, (5, 6, 7), True),
    ("1/size2-mul-@2", 1, 16, 1, 8, (5, 6, 7), True),
    ("1/swapped-roots", 1, 8, 8, 1, (5, 6, 7), True),
    ("1/trailing-garbage", 1, 8, 1, 8, (5, 6, 7, 2), True),
    ("1/trailing-root1", 1, 8, 1, 8, (5, 6, 7, 1), True),
    ("1/trailing-root2", 1, 8, 1, 8, (5, 6, 7, 8), True),
    ("1/truncated-proof", 1, 8, 1, 8, (5, 6), True),
    ("1/wrong-root1", 1, 8, 29, 8, (5, 6, 7), True),
    ("1/wrong-root2", 1, 8, 1, 29, (5, 6, 7), True),
    ("2/empty-proof", 6, 8, 30, 8, (), True),
    ("2/happy-path", 6, 8, 30, 8, (31, 14, 15), False),
    ("2/modified-proof@0-bit-@4", 6, 8, 30, 8, (32, 14, 15), True),
    ("2/modified-proof@1-bit-@4", 6, 8, 30, 8, (31, 33, 15), True),
    ("2/modified-proof@2-bit-@4", 6, 8, 30, 8, (31, 14, 34), True),
    ("2/preceding-garbage", 6, 8, 30, 8, (2, 31, 14, 15), True),
    ("2/preceding-proof-@0", 6, 8, 30, 8, (31, 31, 14, 15), True),
    ("2/preceding-root1", 6, 8, 30, 8, (30, 31, 14, 15), True),
    ("2/preceding-root2", 6, 8, 30, 8, (8, 31, 14, 15), True),
    ("2/size1-XOR-@2", 4, 8, 30, 8, (31, 14, 15), True),
    ("2/size1-plus-@1", 7, 8, 30, 8, (31, 14, 15), True),
    ("2/size1-sub-@1", 5, 8, 30, 8, (31, 14, 15), True),
    ("2/size2-div-@2", 6, 4, 30, 8, (31, 14, 15), True),
    ("2/size2-mul-@2", 6, 16, 30, 8, (31, 14, 15), True),
    ("2/swapped-roots", 6, 8, 8, 30, (31, 14, 15), True),
    ("2/trailing-garbage", 6, 8, 30, 8, (31, 14, 15, 2), True),
    ("2/trailing-root1", 6, 8, 30, 8, (31, 14, 15, 30), True),
    ("2/trailing-root2", 6, 8, 30, 8, (31, 14, 15, 8), True),
    ("2/truncated-proof", 6, 8, 30, 8, (31, 14), True),
    ("2/wrong-root1", 6, 8, 29, 8, (31, 14, 15), True),
    ("2/wrong-root2", 6, 8, 30, 29, (31, 14, 15), True),
    ("3/empty-proof", 2, 5, 20, 23, (), True),
    ("3/happy-path", 2, 5, 20, 23, (6, 13), False),
    ("3/modified-proof@0-bit-@4", 2, 5, 20, 23, (27, 13), True),
    ("3/modified-proof@1-bit-@4", 2, 5, 20, 23, (6, 35), True),
    ("3/preceding-garbage", 2, 5, 20, 23, (2, 6, 13), True),
    ("3/preceding-proof-@0", 2, 5, 20, 23, (6, 6, 13), True),
    ("3/preceding-root1", 2, 5, 20, 23, (20, 6, 13), True),
    ("3/preceding-root2", 2, 5, 20, 23, (23, 6, 13), True),
    ("3/size1-XOR-@2", 0, 5, 20, 23, (6, 13), True),
    ("3/size1-plus-@1", 3, 5, 20, 23, (6, 13), True),
    ("3/size1-sub-@1", 1, 5, 20, 23, (6, 13), True),
    ("3/size2-div-@2", 2, 2, 20, 23, (6, 13), True),
    ("3/size2-mul-@2", 2, 10, 20, 23, (6, 13), True),
    ("3/swapped-roots", 2, 5, 23, 20, (6, 13), True),
    ("3/trailing-garbage", 2, 5, 20, 23, (6, 13, 2), True),
    ("3/trailing-root1", 2, 5, 20, 23, (6, 13, 20), True),
    ("3/trailing-root2", 2, 5, 20, 23, (6, 13, 23), True),
    ("3/truncated-proof", 2, 5, 20, 23, (6,), True),
    ("3/wrong-root1", 2, 5, 29, 23, (6, 13), True),
    ("3/wrong-root2", 2, 5, 20, 29, (6, 13), True),
    ("4/empty-proof", 6, 7, 30, 36, (), True),
    ("4/happy-path", 6, 7, 30, 36, (31, 37, 15), False),
    ("4/modified-proof@0-bit-@4", 6, 7, 30, 36, (32, 37, 15), True),
    ("4/modified-proof@1-bit-@4", 6, 7, 30, 36, (31, 38, 15), True),
    ("4/modified-proof@2-bit-@4", 6, 7, 30, 36, (31, 37, 34), True),
    ("4/preceding-garbage", 6, 7, 30, 36, (2, 31, 37, 15), True),
    ("4/preceding-proof-@0", 6, 7, 30, 36, (31, 31, 37, 15), True),
    ("4/preceding-root1", 6, 7, 30, 36, (30, 31, 37, 15), True),
    ("4/preceding-root2", 6, 7, 30, 36, (36, 31, 37, 15), True),
    ("4/size1-XOR-@2", 4, 7, 30, 36, (31, 37, 15), True),
    ("4/size1-plus-@1", 7, 7, 30, 36, (31, 37, 15), True),
    ("4/size1-sub-@1", 5, 7, 30, 36, (31, 37, 15), True),
    ("4/size2-div-@2", 6, 3, 30, 36, (31, 37, 15), True),
    ("4/size2-mul-@2", 6, 14, 30, 36, (31, 37, 15), True),
    ("4/swapped-roots", 6, 7, 36, 30, (31, 37, 15), True),
    ("4/trailing-garbage", 6, 7, 30, 36, (31, 37, 15, 2), True),
    ("4/trailing-root1", 6, 7, 30, 36, (31, 37, 15, 30), True),
    ("4/trailing-root2", 6, 7, 30, 36, (31, 37, 15, 36), True),
    ("4/truncated-proof", 6, 7, 30, 36, (31, 37), True),
    ("4/wrong-root1", 6, 7, 29, 36, (31, 37, 15), True),
    ("4/wrong-root2", 6, 7, 30, 29, (31, 37, 15), True),
    ("additional/consistency-check-on-empty-tree-size1-is-zero-is-useless", 0, 1, 0, 0, (0,), True),
    ("additional/roots-do-not-match-and-sizes-are-zero", 0, 0, 0, 39, (), True),
    ("additional/roots-do-not-not-match-and-sizes-are-one", 1, 1, 0, 39, (), True),
    ("additional/size1-is-greater-than-size2-again", 2, 1, 40, 39, (), True),
    ("additional/size1-is-greater-than-size2", 1, 0, 40, 39, (), True),
    ("additional/size1-is-zero-and-does-not-equal-size2", 0, 1, 40, 39, (), True),
    ("additional/size1-is-zero-and-size2-is-not-zero", 0, 1, 0, 39, (), True),
    ("additional/sizes-are-equal-one-and-proof-is-empty", 1, 1, 39, 39, (), False),
    ("additional/sizes-are-equal-one-but-roots-are-not", 1, 1, 40, 39, (), True),
    ("additional/sizes-are-equal-zero-and-proof-is-empty", 0, 0, 40, 40, (), True),
    ("additional/sizes-are-equal-zero-but-roots-are-not", 0, 0, 40, 39, (), True),
    ("additional/sizes-do-not-watch-and-proof-is-empty", 1, 2, 40, 39, (), True),
    ("additional/sizes-match-but-proof-is-not-empty-and-sizes-are-one", 1, 1, 0, 0, (0,), True),
    ("additional/sizes-match-but-proof-is-not-empty-and-sizes-are-zero", 0, 0, 0, 0, (0,), True),
]

TD_DEVIATIONS = {
    # Go accepts any bytes as roots when the sizes are equal (here 12 bytes each); this module
    # refuses a root that is not 32 bytes (MalformedProof) whatever the sizes.
    "additional/sizes-are-equal-one-and-proof-is-empty",
}


def _b64(index: int) -> bytes:
    return base64.b64decode(TD_B64[index])


def _outcome(verify: Callable[..., bool], *args: object) -> str:
    """'ok' for True, 'false' for False, 'malformed' for MalformedProof: the three answers a verifier gives."""
    try:
        result = verify(*args)
    except MalformedProof:
        return "malformed"
    assert isinstance(result, bool)
    return "ok" if result else "false"


# --------------------------------------------------------------------------
# Hashing and the reference tree
# --------------------------------------------------------------------------


def test_hashes_are_the_rfc_6962_ones() -> None:
    assert EMPTY_ROOT == hashlib.sha256(b"").digest() == RFC6962_ROOTS[0]
    assert leaf_hash(b"") == RFC6962_NODES[0][0]
    assert leaf_hash(b"\x00") == hashlib.sha256(b"\x00\x00").digest()
    assert node_hash(RFC6962_NODES[0][0], RFC6962_NODES[0][1]) == RFC6962_NODES[1][0]
    assert node_hash(b"a", b"b") == hashlib.sha256(b"\x01ab").digest()


def test_the_reference_tree_has_the_published_root_at_every_size() -> None:
    for size, want in enumerate(RFC6962_ROOTS):
        assert root(RFC6962_HASHES[:size]) == want, size
        frontier = Frontier.of(RFC6962_HASHES[:size])
        assert frontier.size == size
        assert frontier.root() == want, size
        assert list(frontier.nodes) == [RFC6962_NODES[level][index] for level, index in RFC6962_FRONTIERS[size]], size


def test_every_perfect_subtree_of_the_reference_tree_has_the_published_hash() -> None:
    for level, hashes in enumerate(RFC6962_NODES):
        width = 1 << level
        for index, want in enumerate(hashes):
            assert root(RFC6962_HASHES[index * width : (index + 1) * width]) == want, (level, index)


def test_the_reference_trees_inclusion_paths_are_its_sibling_subtrees() -> None:
    for index in range(8):
        want = [RFC6962_NODES[level][(index >> level) ^ 1] for level in range(3)]
        assert inclusion_proof(RFC6962_HASHES, index) == want
        assert verify_inclusion(RFC6962_HASHES[index], index, 8, want, RFC6962_ROOTS[8])


# --------------------------------------------------------------------------
# transparency-dev/merkle's probes
# --------------------------------------------------------------------------


@pytest.mark.parametrize("probe", TD_INCLUSION, ids=lambda p: p[0])
def test_transparency_dev_inclusion_probes(probe: tuple[str, int, int, int, int, tuple[int, ...], bool]) -> None:
    name, index, size, root_ref, leaf_ref, proof_refs, want_error = probe
    proof = [_b64(ref) for ref in proof_refs]
    outcome = _outcome(verify_inclusion, _b64(leaf_ref), index, size, proof, _b64(root_ref))
    assert (outcome != "ok") == want_error, (name, outcome)
    if name.endswith("happy-path"):
        assert inclusion_proof(RFC6962_HASHES[:size], index) == proof
        assert _b64(leaf_ref) == RFC6962_HASHES[index] and _b64(root_ref) == RFC6962_ROOTS[size]


@pytest.mark.parametrize("probe", TD_CONSISTENCY, ids=lambda p: p[0])
def test_transparency_dev_consistency_probes(probe: tuple[str, int, int, int, int, tuple[int, ...], bool]) -> None:
    name, size1, size2, root1_ref, root2_ref, proof_refs, want_error = probe
    proof = [_b64(ref) for ref in proof_refs]
    outcome = _outcome(verify_consistency, size1, size2, _b64(root1_ref), _b64(root2_ref), proof)
    if name in TD_DEVIATIONS:
        assert (outcome, want_error) == ("malformed", False)
        return
    assert (outcome != "ok") == want_error, (name, outcome)
    if name.endswith("happy-path"):
        assert consistency_proof(RFC6962_HASHES[:size2], size1) == proof
        assert (_b64(root1_ref), _b64(root2_ref)) == (RFC6962_ROOTS[size1], RFC6962_ROOTS[size2])


def test_the_probes_exercise_every_answer() -> None:
    """Both tables hold accepted proofs, well-formed wrong ones (False) and malformed ones (raised)."""
    seen = set()
    for _, index, size, root_ref, leaf_ref, refs, _ in TD_INCLUSION:
        proof = [_b64(r) for r in refs]
        seen.add(("inclusion", _outcome(verify_inclusion, _b64(leaf_ref), index, size, proof, _b64(root_ref))))
    for _, size1, size2, r1, r2, refs, _ in TD_CONSISTENCY:
        proof = [_b64(r) for r in refs]
        seen.add(("consistency", _outcome(verify_consistency, size1, size2, _b64(r1), _b64(r2), proof)))
    assert seen == {(kind, answer) for kind in ("inclusion", "consistency") for answer in ("ok", "false", "malformed")}
    assert len(TD_INCLUSION) == 98 and len(TD_CONSISTENCY) == 98


# --------------------------------------------------------------------------
# The makers against RFC 9162's recursive definitions
# --------------------------------------------------------------------------


def _mth(hashes: Sequence[bytes]) -> bytes:
    """RFC 9162 2.1.1 MTH, recursively."""
    if not hashes:
        return EMPTY_ROOT
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return node_hash(_mth(hashes[:k]), _mth(hashes[k:]))


def _path(m: int, hashes: Sequence[bytes]) -> list[bytes]:
    """RFC 9162 2.1.3.1 PATH(m, D[n])."""
    n = len(hashes)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return [*_path(m, hashes[:k]), _mth(hashes[k:])]
    return [*_path(m - k, hashes[k:]), _mth(hashes[:k])]


def _subproof(m: int, hashes: Sequence[bytes], whole: bool) -> list[bytes]:
    """RFC 9162 2.1.4.1 SUBPROOF(m, D[n], b)."""
    n = len(hashes)
    if m == n:
        return [] if whole else [_mth(hashes)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return [*_subproof(m, hashes[:k], whole), _mth(hashes[k:])]
    return [*_subproof(m - k, hashes[k:], False), _mth(hashes[:k])]


def test_the_makers_follow_rfc_9162_for_every_tree_up_to_64_leaves() -> None:
    hashes = [leaf_hash(i.to_bytes(2, "big")) for i in range(64)]
    for n in range(1, 65):
        tree = hashes[:n]
        assert root(tree) == _mth(tree)
        for m in range(n):
            assert inclusion_proof(tree, m) == _path(m, tree), (m, n)
            assert len(_path(m, tree)) == merkle.inclusion_proof_length(m, n)
        for m in range(1, n):
            assert consistency_proof(tree, m) == _subproof(m, tree, True), (m, n)
            assert len(_subproof(m, tree, True)) == merkle.consistency_proof_length(m, n)
        assert consistency_proof(tree, 0) == consistency_proof(tree, n) == []


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------


def _leaves(count: int) -> list[bytes]:
    return [leaf_hash(b"leaf %d" % i) for i in range(count)]


LEAVES = _leaves(300)
FRONTIER_300 = Frontier().extend(LEAVES)
_ROOT_AT: dict[int, bytes] = {}


def _root_at(size: int) -> bytes:
    if size not in _ROOT_AT:
        _ROOT_AT[size] = root(LEAVES[:size])
    return _ROOT_AT[size]


def _flip(value: bytes, bit: int) -> bytes:
    data = bytearray(value)
    data[bit // 8 % len(data)] ^= 1 << (bit % 8)
    return bytes(data)


@settings(max_examples=300)
@given(st.integers(1, 300), st.data())
def test_every_inclusion_proof_verifies_and_every_flipped_bit_fails(size: int, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, size - 1))
    proof = inclusion_proof(LEAVES[:size], index)
    top = _root_at(size)
    assert verify_inclusion(LEAVES[index], index, size, proof, top)
    bit = data.draw(st.integers(0, 255))
    assert not verify_inclusion(_flip(LEAVES[index], bit), index, size, proof, top)
    assert not verify_inclusion(LEAVES[index], index, size, proof, _flip(top, bit))
    for position in range(len(proof)):
        damaged = [*proof[:position], _flip(proof[position], bit), *proof[position + 1 :]]
        assert not verify_inclusion(LEAVES[index], index, size, damaged, top)
    for index_bit in range(size.bit_length()):  # another leaf index: refused or False, never True
        assert _outcome(verify_inclusion, LEAVES[index], index ^ (1 << index_bit), size, proof, top) != "ok"
    assert _outcome(verify_inclusion, LEAVES[index], index, size, [*proof, top], top) == "malformed"
    if proof:
        assert _outcome(verify_inclusion, LEAVES[index], index, size, proof[:-1], top) == "malformed"
        assert _outcome(verify_inclusion, LEAVES[index], index, size, [proof[0][:31], *proof[1:]], top) == "malformed"


@settings(max_examples=300)
@given(st.integers(1, 300), st.data())
def test_every_consistency_proof_verifies_and_every_flipped_bit_fails(size2: int, data: st.DataObject) -> None:
    size1 = data.draw(st.integers(0, size2))
    proof = consistency_proof(LEAVES[:size2], size1)
    root1, root2 = _root_at(size1), _root_at(size2)
    assert verify_consistency(size1, size2, root1, root2, proof)
    bit = data.draw(st.integers(0, 255))
    if 0 < size1:
        assert not verify_consistency(size1, size2, _flip(root1, bit), root2, proof)
    if 0 < size1 < size2:
        assert not verify_consistency(size1, size2, root1, _flip(root2, bit), proof)
    for position in range(len(proof)):
        damaged = [*proof[:position], _flip(proof[position], bit), *proof[position + 1 :]]
        assert not verify_consistency(size1, size2, root1, root2, damaged)
    for size_bit in range(size2.bit_length() + 1):  # another old size: refused or False, never True
        other = size1 ^ (1 << size_bit)
        assert _outcome(verify_consistency, other, size2, root1, root2, proof) != "ok"
    assert _outcome(verify_consistency, size1, size2, root1, root2, [*proof, root1]) == "malformed"


def test_equal_sizes_and_the_empty_tree() -> None:
    assert verify_consistency(5, 5, _root_at(5), _root_at(5), [])
    assert not verify_consistency(5, 5, _root_at(5), _root_at(6), [])
    assert verify_consistency(0, 7, EMPTY_ROOT, _root_at(7), [])
    assert not verify_consistency(0, 7, _root_at(1), _root_at(7), [])
    assert verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    with pytest.raises(MalformedProof):
        verify_consistency(0, 7, EMPTY_ROOT, _root_at(7), [_root_at(1)])


def test_the_tree_size_is_bound_by_the_root_not_by_the_proof() -> None:
    """RFC 9162's checks do not pin the (second) tree size: the path of leaf 0 in a tree of 6 leaves
    also verifies as its path "in a tree of 7" against the 6-leaf root, and a consistency proof to 6
    as one to 7. The size is bound to the root by what signs both (a checkpoint); a verifier takes
    size and root from one signed checkpoint, never from separate sources."""
    path = inclusion_proof(LEAVES[:6], 0)
    assert verify_inclusion(LEAVES[0], 0, 7, path, _root_at(6))
    assert not verify_inclusion(LEAVES[0], 0, 7, path, _root_at(7))
    proof = consistency_proof(LEAVES[:6], 4)
    assert verify_consistency(4, 7, _root_at(4), _root_at(6), proof)
    assert not verify_consistency(4, 7, _root_at(4), _root_at(7), proof)


# --------------------------------------------------------------------------
# The old root a consistency path derives (the check without the old root)
# --------------------------------------------------------------------------


def test_the_reference_trees_consistency_paths_derive_every_published_old_root() -> None:
    for size2 in range(9):
        for size1 in range(size2 + 1):
            path = merkle.consistency_path(RFC6962_HASHES[:size2], size1)
            assert len(path) == merkle.consistency_path_length(size1, size2)
            assert merkle.consistency_old_root(size1, size2, path, RFC6962_ROOTS[size2]) == RFC6962_ROOTS[size1], (size1, size2)
            if 0 < size1 < size2:
                bent = [_flip(path[0], 0), *path[1:]]
                assert merkle.consistency_old_root(size1, size2, bent, RFC6962_ROOTS[size2]) is None, (size1, size2)
                assert merkle.consistency_old_root(size1, size2, path, RFC6962_ROOTS[size2 - 1]) is None, (size1, size2)


@pytest.mark.parametrize("probe", [p for p in TD_CONSISTENCY if p[0].endswith("happy-path")], ids=lambda p: p[0])
def test_transparency_dev_happy_paths_derive_their_old_root(probe: tuple[str, int, int, int, int, tuple[int, ...], bool]) -> None:
    """The published proofs (an old size that is a power of two gets its root in front: RFC 9162 2.1.4.2 step 2)."""
    _, size1, size2, root1_ref, root2_ref, proof_refs, _ = probe
    proof = [_b64(ref) for ref in proof_refs]
    seeded = [_b64(root1_ref), *proof] if 0 < size1 < size2 and size1 & (size1 - 1) == 0 else proof
    assert merkle.consistency_path(RFC6962_HASHES[:size2], size1) == seeded
    assert merkle.consistency_old_root(size1, size2, seeded, _b64(root2_ref)) == _b64(root1_ref)


@settings(max_examples=200)
@given(st.integers(1, 300), st.data())
def test_a_path_that_reproduces_the_new_root_derives_the_true_old_root(size2: int, data: st.DataObject) -> None:
    size1 = data.draw(st.integers(0, size2))
    path = merkle.consistency_path(LEAVES[:size2], size1)
    assert merkle.consistency_old_root(size1, size2, path, _root_at(size2)) == _root_at(size1)
    bit = data.draw(st.integers(0, 255))
    for position in range(len(path)):
        damaged = [*path[:position], _flip(path[position], bit), *path[position + 1 :]]
        assert merkle.consistency_old_root(size1, size2, damaged, _root_at(size2)) is None
    with pytest.raises(MalformedProof):
        merkle.consistency_old_root(size1, size2, [*path, _root_at(size1)], _root_at(size2))


def test_the_derived_old_root_of_the_empty_and_the_same_tree_and_hostile_questions() -> None:
    assert merkle.consistency_old_root(0, 7, [], _root_at(7)) == EMPTY_ROOT
    assert merkle.consistency_old_root(5, 5, [], _root_at(5)) == _root_at(5)
    for call in (
        lambda: merkle.consistency_old_root(3, 2, [], _root_at(2)),
        lambda: merkle.consistency_old_root(-1, 2, [], _root_at(2)),
        lambda: merkle.consistency_old_root(1, 2, [], _root_at(2)),  # a path is needed
        lambda: merkle.consistency_old_root(1, 2, consistency_proof(LEAVES[:2], 1), _root_at(2)),  # not seeded: too short
        lambda: merkle.consistency_old_root(3, 4, [LEAVES[0]] * 3, b"short"),
        lambda: merkle.consistency_old_root(3, 4, b"\x00" * 96, _root_at(4)),
    ):
        with pytest.raises(MalformedProof):
            call()


@pytest.mark.parametrize(
    "call",
    [
        lambda: verify_inclusion(LEAVES[0], 3, 3, [], _root_at(3)),  # index == size
        lambda: verify_inclusion(LEAVES[0], -1, 3, [], _root_at(3)),
        lambda: verify_inclusion(LEAVES[0], 0, 2**64, [], _root_at(3)),
        lambda: verify_inclusion(LEAVES[0], 0, True, [], _root_at(3)),  # a bool is not a size
        lambda: verify_inclusion(LEAVES[0], 0.0, 3, [], _root_at(3)),
        lambda: verify_inclusion(LEAVES[0][:31], 0, 1, [], _root_at(1)),
        lambda: verify_inclusion(LEAVES[0], 0, 1, [], bytearray(32)),
        lambda: verify_inclusion(LEAVES[0], 0, 2, b"\x00" * 32, _root_at(2)),  # bytes, not a list of hashes
        lambda: verify_inclusion(LEAVES[0], 0, 2, ["x" * 32], _root_at(2)),
        lambda: verify_inclusion(LEAVES[0], 0, 2, [LEAVES[1]] * 200, _root_at(2)),
        lambda: verify_inclusion(LEAVES[0], 2**64 - 2, 2**64 - 1, [LEAVES[1]] * 3, _root_at(2)),
        lambda: verify_consistency(3, 2, _root_at(3), _root_at(2), []),
        lambda: verify_consistency(-1, 2, _root_at(1), _root_at(2), []),
        lambda: verify_consistency(1, 2**64, _root_at(1), _root_at(2), []),
        lambda: verify_consistency(1, 2, _root_at(1), _root_at(2), []),  # a proof is needed
        lambda: verify_consistency(2, 2, _root_at(2), _root_at(2), [LEAVES[0]]),
        lambda: verify_consistency(1, 2, None, _root_at(2), [LEAVES[1]]),
        lambda: verify_consistency(1, 2, _root_at(1), _root_at(2), None),
        lambda: inclusion_proof(LEAVES[:3], 3),
        lambda: inclusion_proof(LEAVES[:3], -1),
        lambda: inclusion_proof([b"short"], 0),
        lambda: consistency_proof(LEAVES[:3], 4),
        lambda: root([b"x" * 33]),
    ],
)
def test_hostile_questions_raise_the_typed_error_only(call: object) -> None:
    assert callable(call)
    with pytest.raises(MalformedProof) as caught:
        call()
    assert isinstance(caught.value, MalformedInput) and caught.value.code == "E_MALFORMED_PROOF"


def test_a_proof_for_the_largest_tree_checks_its_length_without_overflow() -> None:
    size = 2**64 - 1
    index = size - 1
    length = merkle.inclusion_proof_length(index, size)
    assert length == 63  # 2**64 - 1 leaves: one perfect subtree per bit, the last leaf's path climbs all of them
    assert verify_inclusion(LEAVES[0], index, size, [LEAVES[1]] * length, _root_at(2)) is False
    assert merkle.consistency_proof_length(2**63, size) == 1  # the old tree is the new one's left half
    assert merkle.consistency_proof_length(1, size) == 64
    with pytest.raises(MalformedProof):
        verify_consistency(1, size, LEAVES[0], _root_at(2), [LEAVES[1]] * 63)


# --------------------------------------------------------------------------
# The frontier
# --------------------------------------------------------------------------


def test_the_frontiers_root_is_the_trees_at_every_size() -> None:
    frontier = Frontier()
    assert frontier.root() == EMPTY_ROOT and frontier.encode() == b"\x01" + bytes(8)
    for size in range(1, 301):
        previous = frontier
        frontier = frontier.append(LEAVES[size - 1])
        assert frontier.size == size and previous.size == size - 1  # immutable: the old value is unchanged
        assert len(frontier.nodes) == size.bit_count()
        assert frontier.root() == _root_at(size), size
        assert Frontier.decode(frontier.encode()) == frontier
    assert frontier == FRONTIER_300


def test_the_frontier_bytes_are_pinned() -> None:
    frontier = Frontier.of(RFC6962_HASHES[:7])
    assert (
        frontier.encode()
        == bytes.fromhex("01" + "0000000000000007") + RFC6962_NODES[2][0] + RFC6962_NODES[1][2] + RFC6962_NODES[0][6]
    )


@settings(max_examples=300)
@given(st.integers(0, 300), st.data())
def test_frontier_bytes_round_trip_and_damaged_bytes_are_refused(size: int, data: st.DataObject) -> None:
    frontier = Frontier.of(LEAVES[:size])
    encoded = frontier.encode()
    assert len(encoded) == 9 + 32 * size.bit_count()
    assert Frontier.decode(encoded) == frontier
    assert Frontier.decode(bytearray(encoded)) == frontier
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(MalformedFrontier):
        Frontier.decode(encoded[:cut])
    with pytest.raises(MalformedFrontier):
        Frontier.decode(encoded + data.draw(st.binary(min_size=1, max_size=40)))
    with pytest.raises(MalformedFrontier):
        Frontier.decode(bytes([data.draw(st.integers(0, 255).filter(lambda v: v != 1))]) + encoded[1:])
    # another size in the header: refused unless it has as many set bits (then it is a different, valid frontier)
    other = data.draw(st.integers(0, 2**64 - 1).filter(lambda v: v != size))
    damaged = encoded[:1] + other.to_bytes(8, "big") + encoded[9:]
    if other.bit_count() == size.bit_count():
        assert Frontier.decode(damaged).size == other
    else:
        with pytest.raises(MalformedFrontier):
            Frontier.decode(damaged)


@given(st.binary(max_size=200))
@settings(max_examples=500)
def test_arbitrary_bytes_decode_or_raise_the_typed_error(raw: bytes) -> None:
    try:
        frontier = Frontier.decode(raw)
    except MalformedFrontier:
        return
    assert frontier.encode() == raw


@pytest.mark.parametrize(
    "make",
    [
        lambda: Frontier(1, ()),
        lambda: Frontier(2, (LEAVES[0], LEAVES[1])),
        lambda: Frontier(-1, ()),
        lambda: Frontier(2**64, ()),
        lambda: Frontier(1, (b"short",)),
        lambda: Frontier(1, [LEAVES[0]]),  # a list is not a tuple
        lambda: Frontier().append(b"short"),
        lambda: Frontier(2**64 - 1, tuple(LEAVES[:1] * 64)).append(LEAVES[0]),
        lambda: Frontier.decode("01"),
    ],
)
def test_frontiers_that_cannot_be_are_refused(make: object) -> None:
    assert callable(make)
    with pytest.raises(MalformedFrontier):
        make()
