import numpy as np
import pytest
import torch
from PIL import Image

from leakdemo.data import available_samples, check_source, item_names, load_batch, load_dataset, to_square_rgb
from leakdemo.errors import LeakdemoError, ParamError
from leakdemo.scenario import from_preset


def params(**kw):
    return dict(from_preset("dlg", kw).params)


def test_samples_are_offline_colour_and_gray():
    names = available_samples()
    assert {"astronaut", "coffee", "rocket", "immunohistochemistry", "camera", "moon"} <= set(names)
    b = load_batch(params(images="camera,coffee", batch_size="2"))
    assert b.images.shape == (2, 3, 32, 32)
    assert torch.allclose(b.images[0, 0], b.images[0, 1])  # grayscale repeated into 3 channels
    assert 0 <= b.images.min() and b.images.max() <= 1


def test_batch_is_deterministic_per_seed_and_named_images_come_first():
    a = load_batch(params(images="rocket", batch_size="3", seed="5"))
    b = load_batch(params(images="rocket", batch_size="3", seed="5"))
    c = load_batch(params(images="rocket", batch_size="3", seed="6"))
    assert a.names == b.names and torch.equal(a.images, b.images)
    assert a.names[0] == "rocket" and a.names != c.names


def test_unknown_image_lists_the_available_ones():
    with pytest.raises(ParamError, match="^images: unknown samples item 'nope'; available: astronaut"):
        load_batch(params(images="nope"))
    with pytest.raises(ParamError, match="^images: unknown samples item 'nope'"):
        load_batch(params(images="coffee,nope"))  # named beyond the batch of 1, still checked
    assert load_batch(params(images="coffee,rocket")).names == ["coffee"]  # the batch starts with them
    with pytest.raises(ParamError, match="^images: lists 'rocket' twice; name each image once$"):
        load_batch(params(images="coffee, rocket,astronaut,rocket", batch_size="3"))


def test_source_checks_before_loading_say_what_loading_would(monkeypatch):
    """The dashboard and sweeps check the private data from item names alone; they must refuse exactly what
    loading refuses, and let through what it accepts."""
    n = len(available_samples())
    cases = [params(batch_size=str(n + 1), images=""),
             params(images="coffee,coffee", batch_size="2"),
             params(data="digits", images="1797", num_classes="10"),
             dict(from_preset("dlm-plus", {"data": "samples", "images": "", "batch_size": 12, "local_steps": 2}).params)]
    for p in cases:
        with pytest.raises(ParamError) as loading:
            load_batch(p, count=p["batch_size"] * p.get("local_steps", 1),
                       count_name="rounds_per_epoch × local_steps × batch_size" if "local_steps" in p else "batch_size")
        with pytest.raises(ParamError) as checking:
            check_source(p)
        assert str(checking.value) == str(loading.value)
    assert str(checking.value) == f"rounds_per_epoch × local_steps × batch_size: must be at most {n} for data=samples, got 24"
    import leakdemo.data as data
    monkeypatch.setattr(data, "sample_image", lambda *a: pytest.fail("a check must not read images"))
    check_source(params(batch_size=str(n), images="rocket"))
    vfl = dict(from_preset("cafe", {"data": "samples", "images": "coffee,rocket", "n_samples": 40,
                                    "batch_size": 4}).params)
    check_source(vfl)  # more than the photos: the data set becomes crops of them
    monkeypatch.undo()
    assert len(load_dataset(vfl, 40).names) == 40
    for p in (dict(vfl, images="nope"), params(images="nope")):
        with pytest.raises(ParamError, match="^images: unknown sample"):
            check_source(p)
    check_source(dict(from_preset("pli").params))  # logit protocols build their own identity sets


def test_digits_and_faces():
    d = load_batch(params(data="digits", images="", batch_size="4", num_classes="10"))
    assert d.images.shape == (4, 3, 32, 32) and all(n.startswith("digit") for n in d.names)
    assert 0 <= int(d.labels.min()) and int(d.labels.max()) < 10
    f = load_batch(params(data="faces", images="3", batch_size="1"))
    assert f.names == ["face #3"]


def test_folder_source_and_corrupt_files(tmp_path):
    for cls in ("cats", "dogs"):
        (tmp_path / cls).mkdir()
        Image.fromarray((np.random.default_rng(0).random((40, 50, 3)) * 255).astype(np.uint8)).save(tmp_path / cls / "a.png")
    b = load_batch(params(data="folder", folder=str(tmp_path), images="dogs/a.png", batch_size="2", num_classes="10"))
    assert sorted(b.labels.tolist()) == [0, 1]
    (tmp_path / "cats" / "broken.png").write_bytes(b"not an image")
    with pytest.raises(LeakdemoError, match="cannot read 'broken.png'"):
        load_batch(params(data="folder", folder=str(tmp_path), images="cats/broken.png"))
    with pytest.raises(ParamError, match="^folder: "):
        load_batch(params(data="folder", folder=str(tmp_path / "missing")))
    # picked by the seed, not named: the folder is at fault, and the message says what to do
    with pytest.raises(ParamError, match=r"^folder: cannot read 'broken.png' as an image .*; the seed picked "
                                         r"cats/broken.png: remove it from the folder"):
        load_batch(params(data="folder", folder=str(tmp_path), images="", batch_size="3"))
    # a folder's items carry their sub-folder: the bare file name is pointed to its full name
    with pytest.raises(ParamError, match=r"^images: unknown folder item 'a.png' \(did you mean cats/a.png or dogs/a.png\?\)"):
        load_batch(params(data="folder", folder=str(tmp_path), images="a.png"))


def test_a_folder_copied_from_a_mac_or_kept_in_git_is_read_for_its_pictures_only(tmp_path):
    """Hidden files and folders are not the user's pictures: a Mac writes '._a.png' (metadata, not an image)
    beside each photo it copies to a USB stick, and the seed picked one: 'folder: cannot read '._a.png' as an
    image'. A hidden '.thumbnails' folder was a class of its own, and its small copies were private images."""
    photo = Image.fromarray((np.random.default_rng(0).random((40, 50, 3)) * 255).astype(np.uint8))
    for cls in ("cats", "dogs"):
        (tmp_path / cls).mkdir()
        photo.save(tmp_path / cls / "a.png")
        (tmp_path / cls / "._a.png").write_bytes(b"\x00\x05\x16\x07Mac OS X        ")
    (tmp_path / ".thumbnails").mkdir()
    photo.resize((8, 8)).save(tmp_path / ".thumbnails" / "a.png")
    (tmp_path / ".git" / "objects").mkdir(parents=True)
    photo.save(tmp_path / ".git" / "objects" / "b.png")
    p = params(data="folder", folder=str(tmp_path), images="", batch_size="2", num_classes="10")
    assert item_names("folder", p) == ["cats/a.png", "dogs/a.png"]
    for seed in range(4):
        b = load_batch({**p, "seed": seed})
        assert sorted(b.names) == ["cats/a.png", "dogs/a.png"] and sorted(b.labels.tolist()) == [0, 1]


def test_a_class_folder_linked_in_from_elsewhere_is_read(tmp_path):
    """A folder of classes put together from links (birds -> a data set's folder elsewhere) had a class 'birds'
    with no images: the links were not followed. A link back up the tree is not walked twice (no loop)."""
    photo = Image.fromarray((np.random.default_rng(0).random((40, 50, 3)) * 255).astype(np.uint8))
    (tmp_path / "elsewhere").mkdir()
    photo.save(tmp_path / "elsewhere" / "b.png")
    (tmp_path / "classes" / "cats").mkdir(parents=True)
    photo.save(tmp_path / "classes" / "cats" / "a.png")
    (tmp_path / "classes" / "birds").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "classes" / "cats" / "up").symlink_to(tmp_path / "classes")
    p = params(data="folder", folder=str(tmp_path / "classes"), images="", batch_size="2", num_classes="10")
    assert item_names("folder", p) == ["birds/b.png", "cats/a.png"]
    assert sorted(load_batch(p).labels.tolist()) == [0, 1]


def _phone_photo(path) -> None:
    """A portrait photo as a phone stores it: landscape pixels (left half red) and an EXIF tag saying
    'turn 90° clockwise to show' (orientation 6), so it is meant to be seen red on top."""
    stored = np.zeros((40, 80, 3), dtype=np.uint8)
    stored[:, :40] = (255, 0, 0)
    im = Image.fromarray(stored)
    exif = im.getexif()
    exif[0x0112] = 6
    im.save(path, format="JPEG", quality=95, exif=exif.tobytes())


def test_phone_photos_stand_upright_and_16_bit_scans_keep_their_greys_from_a_folder_and_an_upload(tmp_path):
    from leakdemo.data import decode_upload
    _phone_photo(tmp_path / "phone.jpg")
    ramp = np.linspace(0, 65535, 64 * 64).reshape(64, 64).astype(np.uint16)
    Image.fromarray(ramp).save(tmp_path / "scan16.png")
    b = load_batch(params(data="folder", folder=str(tmp_path), images="phone.jpg,scan16.png", batch_size="2"))
    red = b.images[0, 0]  # the square crop of the upright photo: red above, black below
    assert red[:12].mean() > 0.9 and red[-12:].mean() < 0.1, "the photo was read lying on its side"
    assert b.images[1].min() < 0.05 and 0.4 < b.images[1, 0, 16, 16] < 0.6  # a grey ramp, not a white square
    upload = decode_upload("phone.jpg", (tmp_path / "phone.jpg").read_bytes())
    assert upload.shape == (80, 40, 3) and upload[:30, :, 0].min() > 200 and upload[50:].max() < 40
    # a damaged EXIF block (cut short: Pillow raises SyntaxError at 7 bytes, struct.error at 10) tells nothing
    # about orientation: the picture is taken as stored, not refused as unreadable, not a crash
    im = Image.fromarray(np.zeros((20, 30, 3), dtype=np.uint8))
    exif = im.getexif()
    exif[0x0112] = 6
    for cut in (7, 10):
        damaged = tmp_path / f"damaged{cut}.png"
        im.save(damaged, format="PNG", exif=exif.tobytes()[:cut])
        assert decode_upload(damaged.name, damaged.read_bytes()).shape == (20, 30, 3)
        assert load_batch(params(data="folder", folder=str(tmp_path), images=damaged.name)).names == [damaged.name]


def test_a_dark_logo_on_a_transparent_background_stays_visible_from_an_upload_and_a_folder(tmp_path):
    """Pillow's convert("RGB") drops the alpha: a black logo on a transparent PNG (transparent pixels stored
    black) became a black square. The background is laid on white, as the page shows it."""
    from leakdemo.data import decode_upload
    logo = np.zeros((40, 40, 4), dtype=np.uint8)
    logo[10:30, 10:30, 3] = 255  # a black square, opaque, on transparent black
    Image.fromarray(logo, "RGBA").save(tmp_path / "logo.png")
    grey = Image.new("L", (40, 40), 0)
    grey.paste(255, (10, 10, 30, 30))
    grey.save(tmp_path / "keyed.png", transparency=255)  # a palette-free PNG whose white is transparent: stays white
    Image.new("LA", (40, 40), (0, 0)).save(tmp_path / "clear.png")
    up = decode_upload("logo.png", (tmp_path / "logo.png").read_bytes())
    assert up[0, 0].tolist() == [255, 255, 255] and up[20, 20].tolist() == [0, 0, 0]
    assert decode_upload("clear.png", (tmp_path / "clear.png").read_bytes()).min() == 255
    assert decode_upload("keyed.png", (tmp_path / "keyed.png").read_bytes())[20, 20].tolist() == [255, 255, 255]
    b = load_batch(params(data="folder", folder=str(tmp_path), images="logo.png", batch_size="1"))
    img = b.images[0]  # (3, 32, 32): white around a black centre
    assert img[:, 0, 0].min() > 0.95 and img[:, 16, 16].max() < 0.05


def test_torchvision_never_downloads(tmp_path):
    with pytest.raises(ParamError, match="^data_root: no CIFAR10 found under .*never downloads") as e:
        load_batch(params(data="torchvision", data_root=str(tmp_path), images=""))
    assert "download=True" not in str(e.value)  # torchvision's own hint would tell the user to download
    assert list(tmp_path.iterdir()) == []


def test_preprocessing_handles_rgba_bool_and_rectangles():
    rgba = np.zeros((20, 30, 4), dtype=np.uint8)
    rgba[..., 3] = 0  # fully transparent -> white
    out = to_square_rgb(rgba, 16)
    assert out.shape == (3, 16, 16) and np.allclose(out, 1)
    assert to_square_rgb(np.ones((9, 9), dtype=bool), 8).shape == (3, 8, 8)
