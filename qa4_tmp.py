import warnings, traceback, numpy as np, timm, torch, vitroll
from PIL import Image
from vitroll import rollout, overlay, load_image, Preprocessing, to_original
torch.manual_seed(0)
m = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=2, num_classes=5).eval()
out = "/tmp/qa4/"
def tryit(name, f):
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = f()
        print(name, "->", getattr(r, "shape", r), [str(x.message)[:100] for x in w])
        return r
    except Exception as e:
        print(name, "EXC", type(e).__name__, str(e)[:300])
# 16-bit grey
a16 = (np.linspace(0, 65535, 64*48).reshape(48, 64)).astype(np.uint16)
Image.fromarray(a16).save(out+"g16.png"); print(Image.open(out+"g16.png").mode)
tryit("16bit png", lambda: rollout(m, out+"g16.png"))
tryit("16bit PIL", lambda: rollout(m, Image.open(out+"g16.png")))
tryit("16bit array", lambda: rollout(m, a16))
tryit("1x1", lambda: rollout(m, np.zeros((1,1,3),np.uint8)))
tryit("strip", lambda: rollout(m, np.random.randint(0,255,(10000,20,3),np.uint8)))
img = Image.fromarray(np.random.randint(0,255,(40,60,3),np.uint8)).convert("CMYK"); img.save(out+"cmyk.jpg")
print(Image.open(out+"cmyk.jpg").mode)
tryit("cmyk", lambda: rollout(m, out+"cmyk.jpg"))
tryit("cmyk PIL", lambda: rollout(m, Image.open(out+"cmyk.jpg")))
p = Image.new("P", (40, 40)); p.putpalette([255,0,0, 0,255,0]*128); p.info["transparency"]=0
p.save(out+"pal.png", transparency=0); print(Image.open(out+"pal.png").info)
tryit("palette", lambda: rollout(m, out+"pal.png"))
x = torch.rand(2,3,32,32)*255
tryit("0..255 float", lambda: rollout(m, x))
tryit("batch0", lambda: rollout(m, torch.zeros(0,3,32,32)))
for verb in ["chefer","flow","occlusion","random_map","center","integrated_gradients","attention","grad_rollout","gradient_shap"]:
    tryit("batch0 "+verb, lambda: getattr(vitroll, verb)(m, torch.zeros(0,3,32,32)))
mh = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=2, num_classes=5).eval().half()
for verb in ["rollout","chefer","flow","occlusion","random_map","attention","grad_rollout", "integrated_gradients"]:
    tryit("half "+verb, lambda: getattr(vitroll, verb)(mh, torch.randn(2,3,32,32)))
mb = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=2, num_classes=5).eval().bfloat16()
for verb in ["rollout","chefer","occlusion"]:
    tryit("bf16 "+verb, lambda: getattr(vitroll, verb)(mb, out+"cmyk.jpg"))
mr = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=(32, 64), depth=2, num_classes=5).eval()
print(Preprocessing.from_model(mr))
r = tryit("rect", lambda: rollout(mr, out+"cmyk.jpg"))
r = tryit("rect chefer", lambda: vitroll.chefer(mr, [out+"cmyk.jpg", out+"g16.png"]))
md = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=2, num_classes=5, dynamic_img_size=True).eval()
print(Preprocessing.from_model(md))
tryit("dyn", lambda: rollout(md, torch.randn(1,3,48,64)))
tryit("dyn pic", lambda: rollout(md, out+"cmyk.jpg"))
tryit("dyn chefer", lambda: vitroll.chefer(md, torch.randn(1,3,48,64)))
tryit("dyn odd", lambda: rollout(md, torch.randn(1,3,50,64)))
