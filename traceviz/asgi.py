import os

from django.core.asgi import get_asgi_application

from traceviz.production import refuse_embedded_secret_key

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")
application = get_asgi_application()
refuse_embedded_secret_key()
