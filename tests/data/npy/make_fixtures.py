#!/usr/bin/env python3
"""Writes the .npy test files of this folder with NumPy itself, so the
reader is tested on what numpy writes (not only on files made by divgpu or
by hand in src/table/npy.rs). The files are committed; rerun with any
Python that has numpy (2.4.6 made them):

    python3 tests/data/npy/make_fixtures.py

table.json is the same 5 x 3 table as embeddings.json, each value written
as the shortest decimal that reads back to the same float32.
"""
import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = np.array([[1.0, -0.5, 1e-40],
                  [-0.0, 3.4e-5, 1.0 / 3.0],
                  [-2.0, 0.75, 123.456],
                  [0.1, 0.2, 0.3],
                  [7.0, -1e-3, 0.0]], dtype="<f4")


def path(name):
    return os.path.join(HERE, name)


def save(name, array, **kw):
    with open(path(name), "wb") as f:
        np.lib.format.write_array(f, array, **kw)


def main():
    save("table_v1.npy", TABLE, version=(1, 0))
    save("table_v2.npy", TABLE, version=(2, 0))
    save("table_v3.npy", TABLE, version=(3, 0))
    rows = ["[" + ", ".join(repr(float(x)) for x in row) + "]" for row in TABLE]
    with open(path("table.json"), "w") as f:
        f.write('{"model": null, "embeddings": [\n' + ",\n".join(rows) + "]}\n")
    # A labelled table: a sidecar as a numpy user would write it (numeric ids).
    np.save(path("labelled.npy"), TABLE)
    with open(path("labelled.titles.json"), "w") as f:
        json.dump({"model": "fixture", "ids": list(range(100, 105)),
                   "titles": ["one", "two", "three", "four", "five"]}, f)
    # Refused: what numpy writes for other dtypes, orders and shapes.
    np.save(path("float64.npy"), TABLE.astype("<f8"))
    np.save(path("bigendian.npy"), TABLE.astype(">f4"))
    np.save(path("int32.npy"), np.arange(15, dtype="<i4").reshape(5, 3))
    np.save(path("fortran.npy"), np.asfortranarray(TABLE))
    np.save(path("one_d.npy"), TABLE[0])
    np.save(path("object.npy"), np.array([[1.0, "a"], [2.0, "b"]], dtype=object), allow_pickle=True)
    nan = TABLE.copy()
    nan[2, 1] = np.nan
    np.save(path("nan.npy"), nan)
    zero = TABLE.copy()
    zero[3] = 0.0
    np.save(path("zero_row.npy"), zero)
    whole = open(path("table_v1.npy"), "rb").read()
    with open(path("truncated.npy"), "wb") as f:
        f.write(whole[:-4])
    assert np.load(path("fortran.npy")).flags.f_contiguous


if __name__ == "__main__":
    main()
