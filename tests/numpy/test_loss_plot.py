"""loss.png: every logged point is drawn (a run with one logged step still
shows it), and both ends of each axis carry a tick."""
import struct
import zlib

ARGS = ["--iters", "1", "--eval-interval", "1", "--batch", "4", "--layers", "1", "--embd", "16",
        "--heads", "2", "--context", "8", "--threads", "1", "--no-progress"]
TRAIN_BLUE = (31, 119, 180)


def read_rgb_png(path):
    """Width, height and rows of (r, g, b) of an 8-bit RGB or RGBA PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, width, height, channels = 8, b"", 0, 0, 3
    while at < len(data):
        (n,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        at += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def test_a_single_logged_step_is_drawn(run, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on a mat while the dog ran far away " * 30)
    r = run("train", "--text", text, "--out", tmp_path / "r", *ARGS)
    assert r.returncode == 0, r.stderr
    _, height, rows = read_rgb_png(tmp_path / "r" / "loss.png")
    # Below the legend (the top 40 rows), the train colour is the point.
    blue = sum(px == TRAIN_BLUE for row in rows[40:height] for px in row)
    assert blue > 0
